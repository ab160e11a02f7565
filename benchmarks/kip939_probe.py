"""KIP-939 (transactions prepared by Kafka, completed by an external coordinator) on
genuine Apache Kafka: what the broker answers at each step.

    python -m benchmarks kip939                 # Kafka 4.4.0, three one-broker runs

Every request is sent raw on a socket (eosflow's ``_protocol`` encoding, at exactly the
version named), so what is printed is the broker's own answer, or "connection closed"
where it drops the request. Three brokers are started in turn from Kafka's jars on
127.0.0.1 and free ports, each stopped by pid:

- ``2pc``: ``transaction.two.phase.commit.enable=true`` and ``unstable.api.versions.
  enable=true`` (InitProducerId v6 is marked unstable in 4.4.0's message specs). The
  commit variant: InitProducerId v6 Enable2Pc=true (transaction timeout asked: 1 s),
  records produced in the transaction (Produce v12, transactions v2), a read_committed
  consumer, 5 s (five timeouts; the broker sweeps every 1 s) beside a plain transaction
  of the same timeout as the control, the client closed, a new client's InitProducerId
  v6 KeepPreparedTxn=true, EndTxn(commit) with the stored producer id and epoch, the
  consumer again. The abort variant: a new client's InitProducerId v6 KeepPreparedTxn=
  false, the consumer, the old producer's EndTxn;
- ``no-2pc``: the same without ``transaction.two.phase.commit.enable``;
- ``2pc-only``: ``transaction.two.phase.commit.enable=true`` alone (what the setting's
  documentation asks for).

Writes ``benchmarks/results/kip939.json`` (every step and answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import struct
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.protocol.types import Int32, TaggedFields
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from eosflow._protocol import _codes, _specs, _wire
from eosflow._protocol._wire import MessageSpec, field
from eosflow.testing._genuine import DEFAULT_VERSION, GenuineKafka

RESULTS = Path(__file__).resolve().parent / "results"
CLIENT = b"kip939-probe"
TIMEOUT_MS = 1000  # the transaction timeout asked of every transaction here
WAIT_S = 5.0  # five timeouts; GenuineKafka sweeps timed-out transactions every second
RETRIED = {
    _codes.COORDINATOR_LOAD_IN_PROGRESS,
    _codes.COORDINATOR_NOT_AVAILABLE,
    _codes.NOT_COORDINATOR,
    _codes.CONCURRENT_TRANSACTIONS,
}
# Kafka's names of codes eosflow's table lacks
NAMES = {53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 105: "TRANSACTIONAL_ID_NOT_FOUND"}

# InitProducerId v6 (KIP-939), as kafka-clients-4.4.0.jar's InitProducerIdRequest.json /
# InitProducerIdResponse.json declare it ("latestVersionUnstable": true). eosflow's
# _specs stops at v4; this spec is used at v6 only, a version nothing else here builds.
INIT_PID_2PC = MessageSpec(
    api_key=22,
    name="InitProducerId",
    versions=(6, 6),
    flexible_from=2,
    request=(
        field("transactional_id", "string"),
        field("transaction_timeout_ms", "int32"),
        field("producer_id", "int64"),
        field("producer_epoch", "int16"),
        field("enable_2pc", "bool"),
        field("keep_prepared_txn", "bool"),
    ),
    response=(
        field("throttle_time_ms", "int32"),
        field("error_code", "int16"),
        field("producer_id", "int64"),
        field("producer_epoch", "int16"),
        field("ongoing_txn_producer_id", "int64"),
        field("ongoing_txn_producer_epoch", "int16"),
    ),
)


def code_name(code: int) -> str:
    return NAMES.get(code) or _codes.name(code)


def ids_of(answer: dict[str, Any]) -> tuple[int, int]:
    """(producer id, epoch) of an InitProducerId answer; (-1, -1) without one."""
    return int(answer.get("producer_id", -1)), int(answer.get("producer_epoch", -1))


class Client:
    """One connection to the broker: a client that can die (``close``)."""

    def __init__(self, port: int) -> None:
        self.port, self._cid = port, 0
        self._rw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def call(self, spec: MessageSpec, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """The decoded answer; ``{"closed": ...}`` when the broker drops the connection."""
        if self._rw is None:
            self._rw = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self._rw
        req, resp = _wire.spec_classes(spec, version)
        flexible = version >= spec.flexible_from
        self._cid += 1
        head = struct.pack(">hhih", spec.api_key, version, self._cid, len(CLIENT)) + CLIENT
        payload = head + (b"\x00" if flexible else b"")
        payload += req.SCHEMA.encode(_wire.to_values(req.SCHEMA, body))
        writer.write(struct.pack(">i", len(payload)) + payload)
        try:
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))
            buf = BytesIO(await asyncio.wait_for(reader.readexactly(size), 30))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.close()
            return {"closed": f"connection closed by the broker, no answer ({type(exc).__name__})"}
        Int32.decode(buf)  # correlation id
        if flexible and spec.api_key != _wire.API_VERSIONS_KEY:
            TaggedFields.decode(buf)  # response header v1
        return dict(resp(*resp.SCHEMA.decode(buf)).to_object())

    async def retried(
        self, spec: MessageSpec, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        """``call`` again while the coordinator loads or ends a transaction (up to 30 s);
        the answer carries the retried codes under ``"retried"``."""
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while True:
            answer = await self.call(spec, version, body)
            code = answer.get("error_code", 0)
            if code not in RETRIED or time.monotonic() > deadline:
                return {**answer, "retried": sorted(set(seen))} if seen else answer
            seen.append(code_name(code))
            await asyncio.sleep(0.1)

    def close(self) -> None:
        if self._rw is not None:
            self._rw[1].close()
            self._rw = None


class Probe:
    """The steps of one broker's run, printed and kept."""

    def __init__(self, name: str, kafka: GenuineKafka) -> None:
        self.name, self.kafka, self.steps = name, kafka, list[dict[str, Any]]()
        self.port = int(kafka.bootstrap_servers.rsplit(":", 1)[1])
        self._found: set[str] = set()

    def record(self, step: str, answer: dict[str, Any]) -> dict[str, Any]:
        shown = {k: v for k, v in answer.items() if k not in ("tags", "throttle_time_ms")}
        if "error_code" in shown:
            shown["error"] = code_name(int(shown.pop("error_code")))
        line = " ".join(f"{k}={v}" for k, v in shown.items() if k != "error")
        print(f"[{self.name}] {step}: {shown.get('error', '')} {line}".rstrip(), flush=True)
        self.steps.append({"step": step, "answer": shown})
        return answer

    async def api_versions(self) -> dict[str, Any]:
        body = {"client_software_name": "kip939-probe", "client_software_version": "0"}
        answer = await Client(self.port).call(_specs.API_VERSIONS, 3, body)
        ranges = {
            a["api_key"]: (a["min_version"], a["max_version"]) for a in answer["api_versions"]
        }
        feats = _wire.finalized_features(answer.get("tags") or {})
        names = {22: "InitProducerId", 26: "EndTxn", 0: "Produce", 65: "DescribeTransactions"}
        shown: dict[str, Any] = {
            n: f"v{ranges[k][0]}-{ranges[k][1]}" for k, n in names.items() if k in ranges
        }
        shown["transaction.version"] = feats.get("transaction.version", 0)
        return self.record("ApiVersions v3", {"error_code": answer["error_code"], **shown})

    async def init(
        self, c: Client, what: str, txn: str, enable_2pc: bool, keep: bool
    ) -> dict[str, Any]:
        body = {
            "transactional_id": txn,
            "transaction_timeout_ms": TIMEOUT_MS,
            "producer_id": -1,
            "producer_epoch": -1,
            "enable_2pc": enable_2pc,
            "keep_prepared_txn": keep,
        }
        if txn not in self._found:  # as a client does first: FindCoordinator, which also
            # has the broker create __transaction_state (else NOT_COORDINATOR)
            await self.kafka.coordinator(txn, "transaction")
            self._found.add(txn)
        step = f"{what} InitProducerId v6 {txn} Enable2Pc={enable_2pc} KeepPreparedTxn={keep}"
        return self.record(step, await c.retried(INIT_PID_2PC, 6, body))

    async def produce(self, c: Client, txn: str, ids: tuple[int, int], topic: str, n: int) -> None:
        b = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=1,
            producer_id=ids[0],
            producer_epoch=ids[1],
            base_sequence=0,
            batch_size=1 << 20,
        )
        for i in range(n):
            b.append(i, int(time.time() * 1000), None, f"{txn}-{i}".encode(), [])
        part = {"partition": 0, "messages": bytes(b.build())}
        body = {
            "transactional_id": txn,
            "required_acks": -1,
            "timeout": 10_000,
            "topics": [{"topic": topic, "partitions": [part]}],
        }
        answer = await c.call(_specs.PRODUCE, 12, body)
        p = answer["topics"][0]["partitions"][0] if "topics" in answer else answer
        keep = ("error_code", "offset", "closed")
        step = f"Produce v12 {n} records to {topic} pid={ids[0]} epoch={ids[1]} ({txn})"
        self.record(step, {k: v for k, v in p.items() if k in keep})

    async def end(self, c: Client, what: str, txn: str, ids: tuple[int, int], commit: bool) -> str:
        body = {
            "transactional_id": txn,
            "producer_id": ids[0],
            "producer_epoch": ids[1],
            "transaction_result": commit,
        }
        result = "commit" if commit else "abort"
        step = f"{what} EndTxn v5 {result} {txn} pid={ids[0]} epoch={ids[1]}"
        answer = self.record(step, await c.retried(_specs.END_TXN, 5, body))
        return code_name(int(answer.get("error_code", -1)))

    async def describe(self, *txns: str) -> dict[str, str]:
        answer = await Client(self.port).call(
            _specs.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": list(txns)}
        )
        states: dict[str, str] = {}
        for s in answer.get("transaction_states", []):
            keep = ("error_code", "transaction_state", "transaction_timeout_ms")
            shown = {k: s[k] for k in keep} | {"producer_epoch": s["producer_epoch"]}
            self.record(f"DescribeTransactions {s['transactional_id']}", shown)
            states[s["transactional_id"]] = s["transaction_state"]
        return states

    async def committed(self, bootstrap: str, topic: str, want: int, wait_s: float) -> int:
        """Records a read_committed consumer reads from ``topic`` within ``wait_s`` (it
        stops early at ``want``), with the partition's last stable offset and high mark."""
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
        await c.start()
        tp, seen = TopicPartition(topic, 0), 0
        try:
            c.assign([tp])
            await c.seek_to_beginning(tp)
            end = time.monotonic() + wait_s
            while seen < want and time.monotonic() < end:
                batches = await c.getmany(tp, timeout_ms=200)
                seen += sum(len(v) for v in batches.values())
            lso, hw = c.last_stable_offset(tp), c.highwater(tp)
        finally:
            await c.stop()
        step = f"read_committed consumer on {topic} ({wait_s:g} s)"
        self.record(step, {"records": seen, "last_stable_offset": lso, "high_watermark": hw})
        return seen


async def create_topics(bootstrap: str, *topics: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, 1, 1) for t in topics])
    finally:
        await admin.close()


async def run_2pc(p: Probe, bootstrap: str, n: int) -> dict[str, Any]:
    """The commit variant (with its plain control) and the abort variant."""
    await create_topics(bootstrap, "kip939-commit", "kip939-abort", "kip939-control")
    out: dict[str, Any] = {}
    first, ctl = Client(p.port), Client(p.port)
    a = await p.init(first, "client-1", "tx-commit", True, False)
    ids = ids_of(a)
    c = await p.init(ctl, "control", "tx-control", False, False)
    ctl_ids = ids_of(c)
    await p.produce(first, "tx-commit", ids, "kip939-commit", n)
    await p.produce(ctl, "tx-control", ctl_ids, "kip939-control", 1)
    await p.describe("tx-commit", "tx-control")
    out["seen_before_completion"] = await p.committed(bootstrap, "kip939-commit", n, 2.0)
    print(f"[{p.name}] (prepared: pid={ids[0]} epoch={ids[1]}; waiting {WAIT_S:g} s)", flush=True)
    await asyncio.sleep(WAIT_S)
    out["states_after_wait"] = await p.describe("tx-commit", "tx-control")
    first.close()
    print(f"[{p.name}] (client-1 closed without ending its transaction)", flush=True)
    second = Client(p.port)
    k = await p.init(second, "client-2", "tx-commit", True, True)
    out["keep_prepared_answer"] = code_name(int(k.get("error_code", -1)))
    out["states_after_keep"] = await p.describe("tx-commit")
    out["commit_by_stored_ids"] = await p.end(second, "client-2", "tx-commit", ids, True)
    out["seen_after_commit"] = await p.committed(bootstrap, "kip939-commit", n, 10.0)
    out["control_commit_after_wait"] = await p.end(ctl, "control", "tx-control", ctl_ids, True)
    out["control_seen"] = await p.committed(bootstrap, "kip939-control", 1, 2.0)
    second.close()
    ctl.close()

    first = Client(p.port)
    a = await p.init(first, "client-1", "tx-abort", True, False)
    ids = ids_of(a)
    await p.produce(first, "tx-abort", ids, "kip939-abort", n)
    out["abort_seen_before"] = await p.committed(bootstrap, "kip939-abort", n, 2.0)
    first.close()
    print(f"[{p.name}] (client-1 closed without ending its transaction)", flush=True)
    second = Client(p.port)
    await p.init(second, "client-2", "tx-abort", True, True)
    b = await p.init(second, "client-2", "tx-abort", True, False)
    out["abort_init_answer"] = code_name(int(b.get("error_code", -1)))
    out["abort_init_retried"] = b.get("retried", [])
    await p.describe("tx-abort")
    out["abort_seen_after"] = await p.committed(bootstrap, "kip939-abort", n, 3.0)
    out["old_commit_after_abort"] = await p.end(second, "old client", "tx-abort", ids, True)
    out["abort_seen_at_end"] = await p.committed(bootstrap, "kip939-abort", n, 2.0)
    second.close()
    return out


async def run_refused(p: Probe, kafka: GenuineKafka) -> dict[str, Any]:
    c = Client(p.port)
    a = await p.init(c, "client", "tx-refused", True, False)
    c.close()
    out: dict[str, Any] = {"answer": a.get("closed") or code_name(int(a["error_code"]))}
    pattern = re.compile(r"(?i)api key 22|INIT_PRODUCER_ID|InitProducerId|not enabled")
    lines = [
        ln for ln in kafka.log_path.read_text(errors="replace").splitlines() if pattern.search(ln)
    ]
    for ln in lines[-2:]:
        print(f"[{p.name}] broker log: {ln[:300]}", flush=True)
    out["broker_log"] = [ln[:300] for ln in lines[-2:]]
    c = Client(p.port)
    plain = await p.init(c, "control", "tx-plain", False, False)
    out["plain_v6"] = plain.get("closed") or code_name(int(plain["error_code"]))
    c.close()
    return out


SCENARIOS = {
    "2pc": {"transaction.two.phase.commit.enable": "true", "unstable.api.versions.enable": "true"},
    "no-2pc": {"unstable.api.versions.enable": "true"},
    "2pc-only": {"transaction.two.phase.commit.enable": "true"},
}


async def main(args: argparse.Namespace) -> None:
    report: dict[str, Any] = {"kafka": args.version, "records": args.records, "runs": {}}
    for name, config in SCENARIOS.items():
        kafka = GenuineKafka(args.version, auto_create_topics=False, config=config)
        print(f"[{name}] starting Apache Kafka {args.version} with {config} ...", flush=True)
        try:
            await kafka.start()
            print(f"[{name}] ready in {kafka.started_in_s:.1f} s (pid {kafka.pid(1)})", flush=True)
            p = Probe(name, kafka)
            await p.api_versions()
            if name == "2pc":
                outcome = await run_2pc(p, kafka.bootstrap_servers, args.records)
            else:
                outcome = await run_refused(p, kafka)
            report["runs"][name] = {"config": config, "outcome": outcome, "steps": p.steps}
        finally:
            kafka.stop_sync()  # by pid: SIGTERM, SIGKILL after 10 s
            print(f"[{name}] Kafka stopped", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "kip939.json"
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=DEFAULT_VERSION, help="Kafka version (4.4.0)")
    parser.add_argument("--records", type=int, default=10, help="records per transaction")
    asyncio.run(main(parser.parse_args()))
