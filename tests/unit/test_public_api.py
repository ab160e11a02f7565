"""The public surface is small and deliberate; changing it must change this test."""

import ast
import gc
from pathlib import Path

import eosflow
import eosflow.testing

PKG = Path(eosflow.__file__).parent


def test_all_is_pinned() -> None:
    assert sorted(eosflow.__all__) == [
        "CommitOutcomeUnknown",
        "ConfigError",
        "EosApp",
        "EosConfig",
        "EosflowError",
        "FatalError",
        "Outcome",
        "Output",
        "ProcessingError",
        "Processor",
        "ProducerFencedError",
        "Record",
        "Stats",
        "TransactionError",
        "load_config",
    ]
    for name in eosflow.__all__:
        assert hasattr(eosflow, name)


def test_testing_all_is_pinned() -> None:
    assert sorted(eosflow.testing.__all__) == [
        "CheckReport",
        "ClusterSettings",
        "FakeCluster",
        "FaultRule",
        "GroupSettings",
        "PROFILES",
        "TxnSettings",
        "check_exactly_once",
        "read_topic",
        "spawn_run",
    ]


def test_error_tree() -> None:
    assert issubclass(eosflow.ProducerFencedError, eosflow.FatalError)
    assert issubclass(eosflow.ProcessingError, eosflow.FatalError)
    assert issubclass(eosflow.CommitOutcomeUnknown, eosflow.TransactionError)
    assert eosflow.TransactionError.retriable and not eosflow.FatalError.retriable


PRIVATE = ("._client", "._coordinator", "._txn_manager", "._sender")


def test_only_the_adapter_touches_aiokafka_private_state() -> None:
    # CPython 3.11.7's compiler raises "AST constructor recursion depth mismatch" if a
    # finaliser (e.g. asyncio logging an unretrieved future left by another test) runs
    # inside ast.parse; collect first and keep the collector off while parsing.
    gc.collect()
    gc.disable()
    try:
        offenders = _private_state_offenders()
    finally:
        gc.enable()
    assert offenders == []


def _private_state_offenders() -> list[str]:
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        text = path.read_text()
        if rel != "_aiokafka.py" and any(p in text for p in PRIVATE):
            offenders.append(rel)
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith(
                    ("aiokafka.producer", "aiokafka.consumer", "aiokafka.conn", "aiokafka.client")
                )
            ):
                if rel != "_aiokafka.py":
                    offenders.append(f"{rel}: {node.module}")
    return offenders


def test_modules_stay_small() -> None:
    sizes = {
        p.relative_to(PKG).as_posix(): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")
    }
    assert max(sizes.values()) < 800, sizes


def test_spark_all_is_pinned() -> None:
    import eosflow.spark

    assert sorted(eosflow.spark.__all__) == [
        "SparkJobError",
        "SparkJobTimeout",
        "SparkProcessor",
        "SparkSettings",
        "spark_message",
    ]
