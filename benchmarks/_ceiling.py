"""The broker's ceiling: what Kafka's own perf tools get from the same broker.

``KafkaTools(version).prepare()`` resolves ``org.apache.kafka:kafka-tools`` of the broker's
version with Maven (cached like the broker's jars: ``<cache>/tools-<version>/libs``).
Then, per turn:

- ``produce``: ``kafka-producer-perf-test`` (``ProducerPerformance``) writing the run's
  record count and size as fast as it can (``--throughput -1``) in transactions of the
  commit interval (``--transaction-duration-ms``), with eosflow's producer batch size
  (256 KiB) and linger 5 ms; its steady-state rate, after a first quarter of the records
  that warms its JVM up (``--warmup-records``: over 200,000 records on a fresh broker
  the whole run made 134k rec/s, its last three quarters 163k);
- ``consume``: ``kafka-consumer-perf-test`` (``ConsumerPerformance``) reading the run's
  input topic read_committed; its fetch rate (``fetch.nMsg.sec``: after the group join).

A copy must do both on one broker, so neither figure can be beaten by a copy:
``ceiling = min(produce, consume)``. On the 2-core machine the tools' JVM shares the cores
with the broker as a contender does. The old flags (``--producer-props``, ``--messages``)
are used because every Kafka 4 release has them.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

from eosflow.testing._genuine_jars import coordinates, resolve_artifacts
from eosflow.testing._genuine_procs import java_command

HEAP_MB = 512
TIMEOUT_S = 600.0
BATCH_BYTES = 256 * 1024  # eosflow's max_batch_bytes
WARMUP_SHARE = 4  # the first quarter of the records warms the tool's JVM up, untimed


def tools_deps(version: str) -> list[tuple[str, str, str]]:
    """kafka-tools of ``version`` and the broker's log binding (the copier contender's
    jars too: ``_jvm``)."""
    return [("org.apache.kafka", "kafka-tools", version), *coordinates(version)[1:]]


_STEADY = re.compile(r"(\d+) steady state records sent, ([\d.]+) records/sec")


class KafkaTools:
    def __init__(self, version: str) -> None:
        self.version = version
        self._libs: Path | None = None
        self._conf = Path(tempfile.mkdtemp(prefix="eosflow-bench-tools-"))

    def prepare(self) -> None:
        """Resolve the jars (blocking: seconds the first time, instant after)."""
        deps = tools_deps(self.version)
        what = f"Kafka tools {self.version}"
        self._libs = resolve_artifacts(f"tools-{self.version}", deps, what, "kafka-tools-")

    def _command(self, main: str, *args: str) -> list[str]:
        if self._libs is None:
            raise RuntimeError("prepare() the Kafka tools first")
        return java_command(
            self._libs, self._conf, main, *args, heap_mb=HEAP_MB, log4j1=False, level="WARN"
        )

    async def produce(
        self, boot: str, topic: str, records: int, size: int, interval_s: float
    ) -> float:
        """Records/s of the transactional perf producer into ``topic``."""
        out = await _run(
            "kafka-producer-perf-test",
            self._command(
                "org.apache.kafka.tools.ProducerPerformance",
                *("--topic", topic, "--num-records", str(records), "--record-size", str(size)),
                *("--warmup-records", str(records // WARMUP_SHARE)),
                *("--throughput", "-1", "--transactional-id", f"perf-{uuid.uuid4().hex[:8]}"),
                *("--transaction-duration-ms", str(max(1, round(interval_s * 1000)))),
                "--producer-props",
                f"bootstrap.servers={boot}",
                f"batch.size={BATCH_BYTES}",
                "linger.ms=5",
            ),
        )
        return steady_rate(out, records - records // WARMUP_SHARE)

    async def consume(self, boot: str, topic: str, records: int) -> float:
        """Records/s the perf consumer fetched from ``topic`` (read_committed)."""
        props = self._conf / "consumer.properties"
        props.write_text("isolation.level=read_committed\n")
        out = await _run(
            "kafka-consumer-perf-test",
            self._command(
                "org.apache.kafka.tools.ConsumerPerformance",
                *("--bootstrap-server", boot, "--topic", topic, "--messages", str(records)),
                *("--consumer.config", str(props), "--timeout", "60000"),
            ),
        )
        lines = [ln for ln in out.splitlines() if ln.count(",") >= 9]
        header = next((ln for ln in lines if "nMsg.sec" in ln), None)
        if header is None or lines[-1] is header:
            raise RuntimeError(f"kafka-consumer-perf-test: no result line:\n{out[-2000:]}")
        row: dict[str, Any] = dict(
            zip([h.strip() for h in header.split(",")], lines[-1].split(","), strict=False)
        )
        if int(float(row["data.consumed.in.nMsg"])) < records:
            raise RuntimeError(
                f"kafka-consumer-perf-test read fewer than {records}:\n{out[-2000:]}"
            )
        return float(row["fetch.nMsg.sec"])


def steady_rate(out: str, steady: int) -> float:
    """The perf producer's steady-state rate: its ``N steady state records sent, R
    records/sec`` line, printed after the whole run's ``records sent`` line. Until
    2026-11-27 the whole run's line was read (the warm-up quarter included), which
    understated the ceiling."""
    found = _STEADY.findall(out)
    if not found or int(found[-1][0]) != steady:
        raise RuntimeError(
            f"kafka-producer-perf-test: no steady-state line for {steady}:\n{out[-2000:]}"
        )
    return float(found[-1][1])


async def _run(what: str, cmd: list[str]) -> str:
    """Run ``cmd`` to its end (killed by pid past ``TIMEOUT_S`` or when interrupted)."""
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exited {proc.returncode}:\n{text[-2000:]}")
    return text
