"""The test kit's genuine schema registry (``eosflow.testing.SchemaRegistry``: Apicurio
Registry 2.4.2.Final, built once with Maven): it starts and answers, holds BACKWARD
compatibility as Confluent's registry does (``"NONE"`` keeps Apicurio's default), leaves
no process behind when stopped, and ``python -m eosflow.testing --schema-registry``
prints its URL and stops it on SIGTERM. Where Java or Maven is missing these skip, and
fail in CI, as the genuine Kafka tests do."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eosflow._timeouts import within
from eosflow.testing import SchemaRegistry
from eosflow.testing._genuine import GenuineUnavailable
from eosflow.testing._registry import RUNNER, build, call

pytestmark = pytest.mark.genuine

ROOT = Path(__file__).resolve().parents[2]

V1 = {"type": "record", "name": "T", "fields": [{"name": "id", "type": "string"}]}
# a new field without a default: old records cannot be read with it (not BACKWARD)
V2_BREAKS = {**V1, "fields": [*V1["fields"], {"name": "amount", "type": "long"}]}
# a new field with a default: BACKWARD compatible
V2_FITS = {**V1, "fields": [*V1["fields"], {"name": "note", "type": "string", "default": ""}]}


def _unavailable(exc: GenuineUnavailable) -> None:
    why = f"a genuine schema registry cannot run here: {exc}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI: no skipping)", pytrace=False)
    pytest.skip(why)


@contextlib.asynccontextmanager
async def fresh(compatibility: str = "BACKWARD") -> AsyncIterator[SchemaRegistry]:
    """A registry of the test's own (the fixture's is shared by the run)."""
    registry = SchemaRegistry(compatibility=compatibility)
    try:
        await registry.start()
    except GenuineUnavailable as exc:
        _unavailable(exc)
    try:
        yield registry
    finally:
        await registry.stop()


async def register(url: str, subject: str, schema: dict[str, object]) -> tuple[int, object]:
    body = {"schema": json.dumps(schema)}
    return await asyncio.to_thread(call, "POST", f"{url}/subjects/{subject}/versions", body)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_registry_starts_empty_and_stop_leaves_no_process() -> None:
    async with fresh() as registry:
        pid, log = registry.pid, registry.log_path
        assert pid is not None and log.is_file()
        assert registry.url.startswith("http://127.0.0.1:")
        assert registry.url.endswith("/apis/ccompat/v7")
        assert 0 < registry.started_in_s < registry.start_timeout_s
        assert await asyncio.to_thread(call, "GET", f"{registry.url}/subjects") == (200, [])
        status, config = await asyncio.to_thread(call, "GET", f"{registry.url}/config")
        assert (status, config["compatibilityLevel"]) == (200, "BACKWARD")
    assert registry.pid is None
    assert gone(pid)
    assert not log.parent.exists()  # its temp folder went with it
    with pytest.raises(OSError):  # nothing listens there any more
        call("GET", f"{registry.url}/subjects", timeout_s=2.0)


async def test_backward_refuses_a_new_field_without_a_default(
    eosflow_schema_registry: SchemaRegistry,
) -> None:
    url, subject = eosflow_schema_registry.url, "registry-kit-t-value"
    status, first = await register(url, subject, V1)
    assert status == 200 and isinstance(first, dict) and first["id"] > 0, first
    # a lookup of the same schema answers the same id (and version 1)
    body = {"schema": json.dumps(V1)}
    status, found = await asyncio.to_thread(call, "POST", f"{url}/subjects/{subject}", body)
    assert status == 200 and isinstance(found, dict), found
    assert (found["id"], found["version"]) == (first["id"], 1)
    # registering it again is the same version, not a new one
    assert await register(url, subject, V1) == (200, {"id": first["id"]})
    status, refused = await register(url, subject, V2_BREAKS)
    assert status == 409, refused
    assert "amount" in json.dumps(refused)  # the message names the difference
    status, second = await register(url, subject, V2_FITS)
    assert status == 200 and isinstance(second, dict) and second["id"] != first["id"], second
    versions = await asyncio.to_thread(call, "GET", f"{url}/subjects/{subject}/versions")
    assert versions == (200, [1, 2])


async def test_none_keeps_apicurios_default_and_takes_any_change() -> None:
    async with fresh("NONE") as registry:
        status, config = await asyncio.to_thread(call, "GET", f"{registry.url}/config")
        assert (status, config["compatibilityLevel"]) == (200, "NONE")
        assert (await register(registry.url, "t-value", V1))[0] == 200
        assert (await register(registry.url, "t-value", V2_BREAKS))[0] == 200


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def is_registry(pid: int) -> bool:
    try:
        return RUNNER in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


async def test_the_command_line_prints_the_registry_and_stops_it_on_sigterm() -> None:
    try:  # built before the clock starts (the first build takes a while)
        await asyncio.to_thread(build)
    except GenuineUnavailable as exc:
        _unavailable(exc)
    cli = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eosflow.testing",
        "--schema-registry",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert cli.stdout is not None
        lines: dict[str, str] = {}
        deadline = time.monotonic() + 120
        while "SCHEMA_REGISTRY" not in lines:
            line = await within(cli.stdout.readline(), max(0.1, deadline - time.monotonic()))
            assert line, f"the command exited (code {await cli.wait()}) before printing"
            key, _, value = line.decode().strip().partition(" ")
            lines[key] = value
        assert list(lines) == ["BOOTSTRAP", "SCHEMA_REGISTRY"]  # in that order
        url = lines["SCHEMA_REGISTRY"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/apis/ccompat/v7")
        assert await asyncio.to_thread(call, "GET", f"{url}/subjects") == (200, [])
        (java,) = [pid for pid in children(cli.pid) if is_registry(pid)]
        cli.send_signal(signal.SIGTERM)
        assert await within(cli.wait(), 30) == 0
        assert gone(java)
        with pytest.raises(OSError):
            call("GET", f"{url}/subjects", timeout_s=2.0)
    finally:
        if cli.returncode is None:
            cli.kill()  # the registry dies with it (PR_SET_PDEATHSIG)
            await cli.wait()
