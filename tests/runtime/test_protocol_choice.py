"""What a session speaks on each cluster (``_protocols``): with the defaults ("auto") the
consumer group protocol and transactions v2 where the cluster finalizes them, the classic
protocol and transactions v1 elsewhere; an explicit ask the cluster lacks is one line.
On the test cluster's profiles here; on genuine 2.4.1 and 4.4.0 (formatted with and
without the features) in ``tests/genuine/test_launcher.py``."""

from __future__ import annotations

import dataclasses

import pytest
from kit import eventually, session_of
from test_mechanisms import Gate, cfg

import eosflow
from eosflow import _aiokafka as ak
from eosflow._engine._protocols import Protocols
from eosflow.testing import FakeCluster
from eosflow.testing._ladder import fake_settings

CLUSTERS = {
    "2.4": ("2.4", None),
    "4.0": ("4.0", None),
    "4.0 without both": ("4.0", {"group.version": 0, "transaction.version": 0}),
    "4.0 with transaction.version 1": ("4.0", {"group.version": 1, "transaction.version": 1}),
}


async def chosen(c: FakeCluster, **asked: object) -> Protocols:
    """What the session chose, once it holds the partition; checked against what it
    does: the group the coordinator holds and the producer's transactions."""
    app = eosflow.EosApp(Gate("out"), cfg(c, **asked))
    async with app:

        async def decided() -> bool:
            s = session_of(app)
            held = s is not None and bool(s._pos.ready | s._pos.held)
            return app.failure is not None or held

        await eventually(decided, timeout_s=20, what="the session holding its partition")
        if app.failure is not None:
            raise app.failure
        s = session_of(app)
        assert s is not None and s.protocols is not None
        g = c.groups.get("g")
        modern = g is not None and g.modern is not None and bool(g.modern.members)
        assert modern == (s.protocols.group == "consumer")
        assert ak.transactions_v2(s.producer) == s.protocols.txn_v2
        return s.protocols


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        ("2.4", Protocols("classic", txn_v2=False)),
        ("4.0", Protocols("consumer", txn_v2=True)),
        ("4.0 without both", Protocols("classic", txn_v2=False)),
        ("4.0 with transaction.version 1", Protocols("consumer", txn_v2=False)),
    ],
)
async def test_the_defaults_follow_the_cluster(cluster: str, expected: Protocols) -> None:
    profile, features = CLUSTERS[cluster]
    settings = dataclasses.replace(fake_settings(), profile=profile, features=features)
    async with FakeCluster(settings) as c:
        c.create_topic("in", 1)
        auto = await chosen(c, group_protocol="auto", transactions_v2="auto")
        assert auto == expected
        lacking = [
            (name, value, what)
            for name, value, what, has in [
                ("group_protocol", "consumer", "the consumer group protocol", auto.group),
                ("transactions_v2", "on", "transactions v2", auto.txn_v2),
            ]
            if has in ("classic", False)
        ]
        for name, value, what in lacking:
            with pytest.raises(eosflow.FatalError) as caught:
                await chosen(c, **{name: value})
            message = str(caught.value)
            assert f"{name} '{value}' needs {what}" in message and "\n" not in message
