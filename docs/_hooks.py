"""MkDocs hooks: the parts of the reference that are generated, never copied by hand.

A page asks for a generated part with an HTML comment on a line of its own:

- ``<!-- eosflow:settings -->`` every setting of ``EosConfig`` (with its nested
  ``security`` and ``ops`` settings) and of ``SparkSettings``: type, default,
  environment variable and ``eosflow run`` flag, read from the models and from the
  command's own parser;
- ``<!-- eosflow:cli -->`` the ``--help`` of ``eosflow`` and of each command;
- ``<!-- eosflow:docstring MODULE -->`` a module's docstring (the error tree);
- ``<!-- eosflow:example PATH -->`` a file of the repository as a code block (the
  examples the tests run);
- ``<!-- eosflow:include PATH -->`` a Markdown file of the repository (the changelog).

A marker it does not know, or a file it cannot find, stops the build.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- eosflow:(\w+)(?: (\S+))? -->$", re.M)
COMMANDS = ["run", "topology", "produce", "consume", "check", "status", "console", "demo"]


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda m: _expand(m.group(1), m.group(2)), markdown)


def _expand(kind: str, arg: str | None) -> str:
    if kind == "settings":
        return settings_markdown()
    if kind == "cli":
        return cli_markdown()
    if kind == "docstring" and arg:
        return module_docstring(arg)
    if kind == "example" and arg:
        lang = "python" if arg.endswith(".py") else "text"
        return f'```{lang} title="{arg}"\n{(ROOT / arg).read_text().rstrip()}\n```'
    if kind == "include" and arg:
        return (ROOT / arg).read_text()
    raise ValueError(f"docs: unknown marker eosflow:{kind} {arg or ''}".strip())


def module_docstring(name: str) -> str:
    """A module's docstring read from its source, not by importing it: the pytest plugin's
    module imports pytest, which the docs extra does not install."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ValueError(f"docs: no module {name}")
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text())) or ""


# --- settings ------------------------------------------------------------------------


def settings_markdown() -> str:
    from eosflow import EosConfig
    from eosflow._config import NESTED
    from eosflow.spark import SparkSettings  # pydantic alone: no Spark needed

    flags = _run_flags()
    top = {n: f for n, f in EosConfig.model_fields.items() if n not in NESTED}
    parts = [
        "## The instance (`EosConfig`)\n",
        _table(EosConfig, top, flags),
    ]
    titles = {"security": "Security (`EosConfig.security`, `KafkaSecurity`)"}
    titles["ops"] = "Operations (`EosConfig.ops`, `OpsSettings`)"
    for name, model in NESTED.items():
        parts += [f"\n## {titles.get(name, name)}\n", _table(model, model.model_fields, flags)]
    parts += [
        "\n## Spark (`eosflow.spark.SparkSettings`)\n",
        "Read from the environment by a `SparkProcessor`'s session; no flags.\n",
        _table(SparkSettings, SparkSettings.model_fields, {}),
    ]
    return "\n".join(parts)


def _run_flags() -> dict[str, str]:
    """``eosflow run``'s flags by setting name, from the parser the command uses."""
    sub = _subparsers()["run"]
    return {
        a.dest: ", ".join(f"`{s}`" for s in a.option_strings)
        for a in sub._actions
        if a.option_strings and a.dest not in ("help", "log_level", "log_format")
    }


def _table(model: Any, fields: dict[str, Any], flags: dict[str, str]) -> str:
    prefix = model.model_config.get("env_prefix", "")
    rows = [
        "| setting | type | default | environment | flag | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for name, field in fields.items():
        cells = [
            f"`{name}`",
            _cell(_type(field.annotation)),
            _cell(_default(field)),
            f"`{prefix}{name.upper()}`",
            flags.get(name, "—"),
            _cell(field.description or ""),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _type(annotation: Any) -> str:
    if any(type(m).__name__ == "ImportString" for m in getattr(annotation, "__metadata__", ())):
        return "import string (module:function)"  # a flag or variable names the function
    origin = get_origin(annotation)
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " or ".join(_type(a) for a in get_args(annotation))
    if origin is not None and getattr(origin, "__name__", "") == "Annotated":
        return _type(get_args(annotation)[0])
    if annotation is type(None):
        return "None"
    text = getattr(annotation, "__name__", None) if origin is None else None
    return text or str(annotation).replace("typing.", "")


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        return repr(field.default_factory())
    if isinstance(field.default, bool):
        return str(field.default).lower()
    return repr(field.default)


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if text and not text[0].isalpha() and "`" not in text else text


# --- the command line ----------------------------------------------------------------


def _subparsers() -> dict[str, Any]:
    from eosflow._cli import _parser, commands

    return commands(_parser())


def cli_markdown() -> str:
    from eosflow._cli import _parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width
    parts = ["```text", "$ eosflow --help", _parser().format_help().rstrip(), "```"]
    subs = _subparsers()
    for command in COMMANDS:
        help_text = subs[command].format_help().rstrip()
        parts += ["", f"## `eosflow {command}`", "", "```text"]
        parts += [f"$ eosflow {command} --help", help_text, "```"]
    return "\n".join(parts)
