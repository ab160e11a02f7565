"""The ``eosflow`` command: ``run``, ``check`` and ``demo``.

Exit status: 0 after a clean stop (SIGTERM/SIGINT end the open transaction, leave the
group), 1 on a fatal error (one line on stderr saying why), 2 on bad usage or config.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
from collections.abc import Sequence

from ._app import EosApp
from ._config import load_config
from ._errors import ConfigError, FatalError
from ._processor import Processor

log = logging.getLogger("eosflow.cli")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        code: int = args.func(args)
        return code
    except ConfigError as exc:
        print(f"eosflow: {exc}", file=sys.stderr)
        return 2
    except FatalError as exc:
        print(f"eosflow: fatal: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eosflow", description=__doc__.splitlines()[0])
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a Processor subclass as an exactly-once service")
    run.add_argument("target", help="package.module:ClassName of a Processor subclass")
    run.add_argument("--bootstrap-servers")
    run.add_argument("--group-id")
    run.add_argument(
        "--input-topic",
        action="append",
        dest="input_topics",
        help="repeatable; falls back to EOSFLOW_INPUT_TOPICS",
    )
    run.add_argument("--transactional-id")
    run.add_argument("--group-instance-id")
    run.add_argument("--dead-letter-topic")
    run.set_defaults(func=_cmd_run)

    chk = sub.add_parser("check", help="verify an output topic holds every input exactly once")
    chk.add_argument("--bootstrap-servers", required=True)
    chk.add_argument("--input-topic", required=True)
    chk.add_argument("--output-topic", required=True)
    chk.add_argument("--group-id", help="also check the group's committed offsets")
    chk.add_argument("--match", choices=["key", "value"], default="key")
    chk.set_defaults(func=_cmd_check)

    demo = sub.add_parser(
        "demo",
        help="an end-to-end exactly-once run on the embedded "
        "test cluster, with a crash in the middle",
    )
    demo.add_argument("--records", type=int, default=50_000)
    demo.add_argument("--instances", type=int, default=2)
    demo.add_argument(
        "--spark",
        action="store_true",
        help="enrich with a Spark job per transaction (needs the spark extra)",
    )
    demo.set_defaults(func=_cmd_demo)
    return p


def load_processor(target: str) -> Processor:
    module_name, sep, class_name = target.partition(":")
    if not sep or not module_name or not class_name:
        raise ConfigError(f"target must look like package.module:ClassName, got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Processor)):
        raise ConfigError(f"{target!r} is not a eosflow.Processor subclass")
    return cls()


def _cmd_run(args: argparse.Namespace) -> int:
    overrides = {
        k: v
        for k, v in {
            "bootstrap_servers": args.bootstrap_servers,
            "group_id": args.group_id,
            "input_topics": tuple(args.input_topics) if args.input_topics else None,
            "transactional_id": args.transactional_id,
            "group_instance_id": args.group_instance_id,
            "dead_letter_topic": args.dead_letter_topic,
        }.items()
        if v is not None
    }
    config = load_config(**overrides)
    processor = load_processor(args.target)
    asyncio.run(_serve(EosApp(processor, config)))
    return 0


async def _serve(app: EosApp) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(app.run())

    stopping: list[asyncio.Task[None]] = []

    def on_signal(name: str) -> None:
        log.info("%s received: finishing the open transaction and leaving the group", name)
        stopping.append(loop.create_task(app.stop()))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    await task
    s = app.stats
    log.info(
        "stopped: %d records, %d transactions committed, %d aborted",
        s.records,
        s.committed,
        s.aborted,
    )


def _cmd_check(args: argparse.Namespace) -> int:
    from .testing import check_exactly_once

    report = asyncio.run(
        check_exactly_once(
            args.bootstrap_servers,
            args.input_topic,
            args.output_topic,
            match=args.match,
            group_id=args.group_id,
        )
    )
    print(report.summary())
    return 0 if report.ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    if args.spark:
        import eosflow.spark  # noqa: F401  (fails early with the install hint)
    return 0 if asyncio.run(run_demo(args.records, args.instances, args.spark)) else 1
