"""A topic eosflow has just created or found (a changelog, a repartition topic) whose
metadata is late -- a ZooKeeper broker's cache lags a creation by seconds on a slow host:
CI's regroup chaos on genuine 2.4.1 lost an instance at its start this way -- is no
missing topic: ``partition_counts(..., exist=True)`` raises ``TransientError``, which a
start retries, where a topic not known to exist stays a one-line ``FatalError``."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

import eosflow
from eosflow import _aiokafka as ak
from eosflow._errors import TransientError
from eosflow.testing import FakeCluster
from eosflow.testing._ladder import fake_settings


# Metadata answers held past the wait, for a topic created after the producer's first
# metadata: known to exist, a TransientError naming the step; not known, the FatalError
# saying it does not exist; answered again, its count. Caught: ``exist`` ignored (the
# changelog's late metadata stopped the start).
async def test_late_metadata_of_a_topic_known_to_exist_is_transient() -> None:
    async with FakeCluster(fake_settings()) as c:
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()
        try:
            c.create_topic("late", 3)  # unknown to the producer's metadata so far
            held = c.intercept("Metadata", delay_s=1.0, times=None)  # the wait is 0.3 s
            with pytest.raises(TransientError, match="metadata of topic 'late'"):
                await ak.partition_counts(p, ["late"], 0.3, exist=True)
            with pytest.raises(eosflow.FatalError, match=r"'late' has no metadata after 0\.3 s"):
                await ak.partition_counts(p, ["late"], 0.3)
            c.remove_fault(held)
            assert await ak.partition_counts(p, ["late"], 5.0, exist=True) == {"late": 3}
        finally:
            await p.stop()
