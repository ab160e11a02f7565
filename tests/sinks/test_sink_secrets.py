"""No PostgreSQL password in any line (issue 51.2), whichever form the DSN gives it in.

Before: a password given as ``?password=`` was printed in every retry warning and in the
fatal line (only a URI's ``user:password@`` was taken out), a libpq ``key=value`` DSN
was refused with the whole string in the line, and a non-numeric port stopped the app
with "unexpected ValueError". Here every form is run against a database that answers
(the test kit's, which trusts its user: the password is carried, not checked) and one
that never does (retries, then the fatal line), with every log record of every logger
captured; and ``eosflow run`` as an operator runs it."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kit import app_config
from sinkkit import Rows, rows_database, seed, written

import eosflow
from eosflow._servers import Postgres
from eosflow.testing import FakeCluster, spawn_run

ROOT = Path(__file__).parents[2]
SECRET = "Tr0ub4dor&3 x"  # a space and an ampersand: quoting in every form
FORMS = {
    "uri": "postgresql://postgres:Tr0ub4dor%263%20x@127.0.0.1:{port}/postgres",
    "uri-query": "postgresql://postgres@127.0.0.1:{port}/postgres?password=Tr0ub4dor%263+x",
    "key-value": "host=127.0.0.1 port={port} user=postgres password='Tr0ub4dor&3 x' "
    "dbname=postgres",
}


@pytest.fixture
async def postgres() -> AsyncIterator[Postgres]:
    async with rows_database() as pg:
        yield pg


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _leaks(caplog: pytest.LogCaptureFixture, *texts: str) -> list[str]:
    lines = [r.getMessage() for r in caplog.records]
    lines += [caplog.text, *texts]
    return [line for line in lines if SECRET in line or "Tr0ub4dor" in line]


@pytest.mark.parametrize("form", sorted(FORMS))
async def test_no_form_of_the_password_reaches_a_line(
    cluster: FakeCluster, postgres: Postgres, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    c = cluster
    c.create_topic("in", 2)
    await seed(c.bootstrap_servers, "in", 20, 2)
    app = eosflow.EosApp(Rows(FORMS[form].format(port=postgres.port)), app_config(c))
    async with app:  # a database that answers: the rows land
        await asyncio.wait_for(written(postgres, 20), 60)
    assert not _leaks(caplog)
    assert "127.0.0.1" in caplog.text  # the lines name the database, without the secret

    caplog.clear()
    gone = Rows(FORMS[form].format(port=_closed_port()))
    with pytest.raises(eosflow.FatalError) as caught:  # one that never answers
        await asyncio.wait_for(eosflow.EosApp(gone, app_config(c, retry_timeout_s=2.0)).run(), 60)
    assert "retrying" in caplog.text and "postgresql://postgres@127.0.0.1" in str(caught.value)
    assert not _leaks(caplog, str(caught.value), repr(caught.value))


# `eosflow run` with the DSN in the environment, as an operator runs it: a database that
# does not answer ends it with exit 1, and a port that is not a number with exit 2 and
# one line naming the setting -- neither with the password on stderr.
async def test_eosflow_run_prints_no_password(cluster: FakeCluster) -> None:
    c = cluster
    c.create_topic("in", 1)
    await seed(c.bootstrap_servers, "in", 5, 1)
    for dsn, code in (
        (FORMS["key-value"].format(port=_closed_port()), 1),
        (FORMS["uri-query"].format(port="54x32"), 2),
    ):
        proc = await spawn_run(
            "sinkkit:Rows",
            bootstrap_servers=c.bootstrap_servers,
            group_id="g",
            input_topics=("in",),
            transactional_id="tx-secret",
            env={
                "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
                "EOSFLOW_POSTGRES_DSN": dsn,
                "EOSFLOW_RETRY_TIMEOUT_S": "2",
            },
            capture=True,
            log_level="debug",
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        text = (out + err).decode(errors="replace")
        assert proc.returncode == code, text[-2000:]
        assert "Tr0ub4dor" not in text
        fatal = [ln for ln in text.splitlines() if ln.startswith("eosflow: ")]
        assert fatal, text[-2000:]
        if code == 2:
            assert "EOSFLOW_POSTGRES_DSN" in fatal[-1] and "port" in fatal[-1], fatal
