"""The ``eosflow`` command: ``run``, ``check``, ``status``, ``console`` and ``demo``.

Exit status: 0 after a clean stop (SIGTERM/SIGINT end the open transaction, leave the
group), 1 on a fatal error (one line on stderr saying why), 2 on bad usage or config
(including a processor that cannot be imported or built), 3 when the transactional id was
fenced (``ProducerFencedError``: a newer instance owns it, or -- on a cluster without
KIP-360, which cannot tell the two apart -- this instance's transaction timed out while it
was paused). An error that is not eosflow's counts as fatal too: one line, its traceback
only at ``--log-level debug``.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import logging
import os
import re
import signal
import sys
import types
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, NoReturn, TypeVar, Union, get_args, get_origin

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from ._app import EosApp
from ._config import (
    ENV_PREFIX,
    NESTED,
    EosConfig,
    app_overrides,
    check_app_settings,
    load_config,
    load_security,
)
from ._errors import ConfigError, EosflowError, FatalError, ProducerFencedError
from ._ops import JsonLines, configure_logs, load_plan, load_processor
from ._security import KafkaSecurity
from ._version import __version__

log = logging.getLogger("eosflow.cli")

LOG_LEVELS = ["debug", "info", "warning", "error"]
LOG_FORMATS = ["text", "json"]
# extra spellings of generated flags (``--input-topic`` reads better repeated)
_ALIASES = {"input_topics": ("--input-topic",)}

T = TypeVar("T")

EXIT_FENCED = 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except ConfigError as exc:
        print(f"eosflow: {_one_line(exc)}", file=sys.stderr)
        return 2
    configure_logs(args.log_level, args.log_format)
    try:
        code: int = args.func(args)
        return code
    except ConfigError as exc:
        _last_word(args, f"eosflow: {_one_line(exc)}")
        return 2
    except EosflowError as exc:  # FatalError, and any other eosflow error reaching here
        if exc.__cause__ is not None:  # what the error boundary mapped, for debugging
            log.debug("cause of the fatal error", exc_info=exc)
        _last_word(args, f"eosflow: fatal: {_one_line(exc)}")
        # fenced has its own code: a supervisor may restart it (on a cluster without
        # KIP-360 a paused instance whose transaction timed out is fenced too) or not
        return EXIT_FENCED if isinstance(exc, ProducerFencedError) else 1
    except KeyboardInterrupt:
        return 130


def _last_word(args: argparse.Namespace, line: str) -> None:
    """The one line on stderr that says why the command failed: plain, or with
    ``--log-format json`` a log object like every other line (level ERROR)."""
    if args.log_format == "json":
        line = JsonLines().format(
            logging.makeLogRecord(
                {"name": "eosflow", "levelno": logging.ERROR, "levelname": "ERROR", "msg": line}
            )
        )
    print(line, file=sys.stderr)


def version_line() -> str:
    """What ``eosflow --version`` prints: eosflow's version, then aiokafka's and Python's
    (the two a bug report needs first)."""
    import platform
    from importlib.metadata import version

    python = platform.python_version()
    return f"eosflow {__version__} (aiokafka {version('aiokafka')}, Python {python})"


class _Version(argparse.Action):
    """``--version``: the line is built only when asked (reading aiokafka's installed
    metadata takes ~45 ms, which every ``eosflow run`` would pay at start otherwise)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: Any) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help="print the version")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(version_line())
        parser.exit()


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, by name (for its help text: the docs and their tests)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


class _Parser(argparse.ArgumentParser):
    """argparse with eosflow's treatment of a mistyped flag: no prefix matching (a flag
    is its whole name: ``--commit-interval`` is not ``--commit-interval-s``), and a
    mistake is one ``ConfigError`` line (exit 2) naming the closest flag -- not a usage
    dump."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw["allow_abbrev"] = False
        super().__init__(*args, **kw)
        self._command: str | None = None  # the command parsed, once known

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        self._command = getattr(parsed, "command", None)  # the root's: its command's flags
        return parsed, extras

    def _of_command(self) -> argparse.ArgumentParser:
        """The parser whose flags a mistyped one is matched against: the command's
        (``run --group`` is not ``demo --regroup``), else this one's, commands included."""
        sub = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or self._command is None:
            return self
        return sub.choices.get(self._command, self)  # type: ignore[no-any-return]

    def error(self, message: str) -> NoReturn:
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown is not None and unknown.group(1).startswith("-"):
            flag = unknown.group(1).split("=", 1)[0]
            close = difflib.get_close_matches(flag, sorted(_flags(self._of_command())), n=1)
            hint = f"did you mean {close[0]}?" if close else f"see {self.prog} --help"
            raise ConfigError(f"unknown flag {flag}; {hint}")
        raise ConfigError(f"{message} ({self.prog} --help)")


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every flag of ``parser`` and of its commands."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(s for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                found |= _flags(command)
    return found


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="eosflow",
        description="Exactly-once consume-transform-produce on Apache Kafka: the commands "
        "run, produce, consume, check, status, console and demo.",
    )
    p.add_argument("--version", action=_Version)
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    p.add_argument("--log-format", default="text", choices=LOG_FORMATS)
    # the same option on every command, so it may also follow the command's name; not
    # given there, it leaves the value given before the command (or the default) alone
    common = _Parser(add_help=False)
    common.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=argparse.SUPPRESS,
        help="log level (default: info; also accepted before the command)",
    )
    common.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=argparse.SUPPRESS,
        help="text lines, or one JSON object per line (default: text)",
    )
    sub = p.add_subparsers(required=True, metavar="COMMAND", dest="command")  # _Parser too

    run = sub.add_parser(
        "run", parents=[common], help="run a Processor subclass as an exactly-once service"
    )
    run.add_argument("target", help="package.module:ClassName of a Processor subclass")
    run.add_argument(
        "--app-dir",
        default=".",
        help="look for the target's module in this folder first (default: the current "
        "folder, as python -m does)",
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one of the processor's own settings (eosflow.AppSettings), over its "
        "EOSFLOW_APP_<NAME> variable; repeat for more",
    )
    _add_config_flags(run)
    run.set_defaults(func=_cmd_run)

    chk = sub.add_parser(
        "check", parents=[common], help="verify an output topic holds every input exactly once"
    )
    chk.add_argument("--bootstrap-servers", required=True)
    chk.add_argument("--input-topic", required=True)
    chk.add_argument("--output-topic", required=True)
    chk.add_argument("--group-id", help="also check the group's committed offsets")
    chk.add_argument("--match", choices=["key", "value"], default="key")
    chk.add_argument(
        "--dead-letter-topic",
        help="count inputs found dead-lettered there (by their eosflow.source header) as "
        "accounted for; an input both output and dead-lettered is a duplicate",
    )
    _add_config_flags(chk, security_only=True)
    chk.set_defaults(func=_cmd_check)

    prod = sub.add_parser(
        "produce", parents=[common], help="send standard input to a topic, a record a line"
    )
    prod.add_argument("topic")
    prod.add_argument("--bootstrap-servers", required=True)
    prod.add_argument("--key-separator", help="a line's text before it is the record's key")
    prod.add_argument(
        "--json",
        action="store_true",
        help="each line a JSON object: key, value (null: a tombstone), headers, "
        "timestamp_ms, partition",
    )
    prod.add_argument(
        "--header", action="append", default=[], metavar="NAME=VALUE", help="on every record"
    )
    _add_config_flags(prod, security_only=True)
    prod.set_defaults(func=_cmd_topic_io)
    cons = sub.add_parser(
        "consume", parents=[common], help="print a topic's committed records, a line each"
    )
    cons.add_argument("topic")
    cons.add_argument("--bootstrap-servers", required=True)
    cons.add_argument("--from", dest="from_", choices=["beginning", "end"], default="beginning")
    cons.add_argument("--count", type=int, metavar="N", help="stop after N records")
    cons.add_argument("--idle-s", type=float, metavar="SECONDS", help="stop when none came")
    cons.add_argument("--key-separator", help="print key, this, value")
    cons.add_argument("--json", action="store_true", help="each record a JSON object")
    _add_config_flags(cons, security_only=True)
    cons.set_defaults(func=_cmd_topic_io)

    topo = sub.add_parser(
        "topology", parents=[common], help="print a Pipeline's stages and their topics"
    )
    topo.add_argument("target", help="package.module:ClassName of a Pipeline subclass")
    topo.add_argument("--group-id", required=True, help="the app's group (names its topics)")
    topo.add_argument("--app-dir", default=".", help="look for the module here first")
    topo.set_defaults(func=_cmd_topology)

    status = sub.add_parser(
        "status",
        parents=[common],
        help="a group's partitions: committed offset, last stable offset, lag, member",
    )
    status.add_argument("target", nargs="?", help="module:Class of its Pipeline: lag by stage")
    status.add_argument("--bootstrap-servers", required=True)
    status.add_argument("--group-id", required=True)
    status.add_argument("--app-dir", default=".", help="look for the module here first")
    _add_config_flags(status, security_only=True)
    status.set_defaults(func=_cmd_status)

    con = sub.add_parser(
        "console", parents=[common], help="a group's page in the browser, live: what status reads"
    )
    con.add_argument("--bootstrap-servers", required=True)
    con.add_argument("--group-id", required=True)
    con.add_argument("--port", type=int, default=0, help="on 127.0.0.1 (default 0: a free one)")
    _add_config_flags(con, security_only=True)
    con.set_defaults(func=_cmd_console)

    demo = sub.add_parser(
        "demo",
        parents=[common],
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
    demo.add_argument(
        "--stateful",
        action="store_true",
        help="count orders per customer in a state store, and check the final counts",
    )
    demo.add_argument(
        "--windows",
        action="store_true",
        help="count orders per customer per minute of event time, each minute's count "
        "emitted once when it closes, and check the finals",
    )
    demo.add_argument(
        "--join",
        action="store_true",
        help="join each order with its customer's row of a table as of the order's time, "
        "and check every order's row against the input",
    )
    demo.add_argument(
        "--typed",
        action="store_true",
        help="orders in Avro through the test kit's schema registry (needs Java 17, Maven "
        "and the schemas extra), validated into a model, one bad order dead-lettered",
    )
    demo.add_argument(
        "--regroup",
        action="store_true",
        help="a pipeline of two stages: orders keyed by customer regrouped by product, "
        "then counted per product per minute of event time, each minute's final checked",
    )
    demo.add_argument(
        "--sink",
        choices=["postgres"],
        help="write the orders into a PostgreSQL table (the test kit's server), and check "
        "every order is one row (needs the postgres and test extras)",
    )
    demo.set_defaults(func=_cmd_demo)
    return p


def _add_config_flags(parser: argparse.ArgumentParser, *, security_only: bool = False) -> None:
    """One flag per ``EosConfig`` field, its help the field's description. Values stay
    strings for pydantic to validate, so a bad one is a ``ConfigError`` naming the field."""
    settings = (
        None
        if security_only
        else parser.add_argument_group(
            "settings",
            f"every EosConfig field; a flag not given falls back to {ENV_PREFIX}<FIELD> in "
            "the environment, then to the default",
        )
    )
    security = parser.add_argument_group(
        "security",
        "TLS and SASL of every connection (EosConfig.security); prefer the environment "
        f"for passwords ({ENV_PREFIX}SASL_PASSWORD): flags show in the process list",
    )
    fields = [(security, n, f) for n, f in KafkaSecurity.model_fields.items()]
    if settings is not None:
        ops = parser.add_argument_group(
            "operations", "metrics, health probes, progress and tracing (EosConfig.ops)"
        )
        fields[:0] = [
            (settings, n, f) for n, f in EosConfig.model_fields.items() if n not in NESTED
        ]
        fields += [(ops, n, f) for n, f in NESTED["ops"].model_fields.items()]
    for group, name, field in fields:
        flags = ["--" + name.replace("_", "-"), *_ALIASES.get(name, ())]
        kind, choices = _kind(name, field)
        kw: dict[str, Any] = {"dest": name, "default": None, "help": _help(name, field)}
        if kind == "bool":
            group.add_argument(*flags, action=argparse.BooleanOptionalAction, **kw)
        elif kind == "tuple":
            kw["metavar"] = "A[,B...]"
            kw["help"] = "repeatable; " + kw["help"]
            group.add_argument(*flags, action="extend", type=_split_commas, **kw)
        else:
            kw["metavar"] = "SECONDS" if name.endswith("_s") else None
            if field.annotation in (int, int | None):
                kw["metavar"] = "N"
            group.add_argument(*flags, choices=choices, **kw)


def _kind(name: str, field: FieldInfo) -> tuple[str, list[str] | None]:
    annotation = field.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"EosConfig.{name}: no flag for the type {annotation}")
        annotation = inner[0]
    if annotation is bool:
        return "bool", None
    if get_origin(annotation) is tuple:
        return "tuple", None
    if get_origin(annotation) is Literal:
        return "value", [str(a) for a in get_args(annotation)]
    if annotation in (str, int, float, SecretStr) or get_origin(annotation) is Annotated:
        return "value", None  # Annotated: a file path or an import string
    raise TypeError(f"EosConfig.{name}: no flag for the type {annotation}")


def _help(name: str, field: FieldInfo) -> str:
    if field.is_required():
        default = "required"
    elif field.default is None:
        default = "default: unset"
    elif isinstance(field.default, bool):
        default = "default: " + str(field.default).lower()
    elif isinstance(field.default, float):
        default = f"default: {field.default:g}"
    else:
        default = f"default: {field.default}"
    text = f"{field.description} ({default}; env {ENV_PREFIX}{name.upper()})"
    return text.replace("%", "%%")


def _split_commas(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def config_values(args: argparse.Namespace) -> dict[str, object]:
    """The settings given as flags (the rest comes from the environment or defaults)."""
    values: dict[str, object] = {}
    for name in EosConfig.model_fields:
        value = getattr(args, name, None)
        if value is not None and name not in NESTED:
            values[name] = value
    for name, model in NESTED.items():
        given = {n: getattr(args, n, None) for n in model.model_fields}
        given = {n: v for n, v in given.items() if v is not None}
        if given:
            values[name] = given
    return values


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    text = _one_line(exc)
    if text.startswith(name + ": "):  # some libraries (aiokafka) put the name in str()
        text = text[len(name) + 2 :]
    return f"{name}: {text}" if text else name


def _guarded(call: Callable[[], T]) -> T:
    """Run ``call``; an exception that is not eosflow's becomes a one-line
    ``FatalError`` (its traceback is logged at debug level only)."""
    try:
        return call()
    except EosflowError:
        raise
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)
        raise FatalError(f"unexpected {_describe(exc)}") from None


def _cmd_run(args: argparse.Namespace) -> int:
    config = load_config(**config_values(args))
    flags = app_overrides(args.set)  # where the processor's AppSettings read them
    processor = load_processor(args.target, args.app_dir)
    check_app_settings(flags, os.environ)
    _guarded(lambda: asyncio.run(_serve(EosApp(processor, config))))
    return 0


async def _serve(app: EosApp) -> None:
    """Run ``app`` until it ends. The first SIGTERM or SIGINT stops it cleanly: the open
    transaction is finished, the group left, exit 0. A second one, for a stop that does
    not end (a processor stuck in ``process()``, a broker that stopped answering), cancels
    the app: the open transaction is aborted (or its outcome is unknown to the broker
    until the transaction timeout) and the exit is 1, saying so."""
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(app.run())

    stopping: list[asyncio.Task[None]] = []
    forced: list[str] = []

    def on_signal(name: str) -> None:
        if stopping:
            log.warning("second %s received: cancelling the app", name)
            forced.append(name)
            task.cancel()
            return
        log.info("%s received: finishing the open transaction and leaving the group", name)
        stopping.append(loop.create_task(app.stop()))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        await task
    except asyncio.CancelledError:
        if not forced:
            raise
        outcome = app.last_outcome.value if app.last_outcome else "none open"
        raise FatalError(
            f"stopped by force on a second {forced[0]}; the last transaction: {outcome}"
        ) from None
    s = app.stats
    log.info(
        "stopped: %d records, %d transactions committed, %d aborted",
        s.records,
        s.committed,
        s.aborted,
    )


def _cmd_check(args: argparse.Namespace) -> int:
    from ._checks import check_exactly_once

    report = _guarded(
        lambda: asyncio.run(
            check_exactly_once(
                args.bootstrap_servers,
                args.input_topic,
                args.output_topic,
                match=args.match,
                group_id=args.group_id,
                dead_letter_topic=args.dead_letter_topic,
                security=load_security(config_values(args).get("security")),
            )
        )
    )
    print(report.summary())
    return 0 if report.ok else 1


def _cmd_topic_io(args: argparse.Namespace) -> int:
    from ._ops import consume_command, produce_command

    command = produce_command if args.command == "produce" else consume_command
    security = load_security(config_values(args).get("security"))
    return _guarded(lambda: command(args, security))


def _cmd_topology(args: argparse.Namespace) -> int:
    print(load_plan(args.target, args.app_dir, args.group_id).describe())
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from ._ops import group_status

    plan = load_plan(args.target, args.app_dir, args.group_id) if args.target else None
    report = _guarded(
        lambda: asyncio.run(
            group_status(
                args.bootstrap_servers,
                args.group_id,
                load_security(config_values(args).get("security")),
            )
        )
    )
    print(report.table(None if plan is None else plan.inputs()))
    return 0


def _cmd_console(args: argparse.Namespace) -> int:
    from ._ops import console_command

    security = load_security(config_values(args).get("security"))
    return console_command(args.bootstrap_servers, args.group_id, security, args.port)


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    if args.spark:
        import eosflow.spark  # noqa: F401  (fails early with the install hint)
    picked = args.spark + args.stateful + args.windows + args.join + args.typed + args.regroup
    if picked + bool(args.sink) > 1:
        print(
            "eosflow: --spark, --stateful, --windows, --join, --typed, --regroup and --sink "
            "are separate demos; pick one",
            file=sys.stderr,
        )
        return 2
    ok = asyncio.run(
        run_demo(
            args.records,
            args.instances,
            args.spark,
            args.stateful,
            args.windows,
            args.join,
            sink=bool(args.sink),
            typed=args.typed,
            regroup=args.regroup,
        )
    )
    return 0 if ok else 1
