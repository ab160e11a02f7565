"""``package.module:ClassName`` to the object an app runs (``eosflow run``, ``eosflow
topology``): a ``Processor``, a ``PostgresSink`` or a ``Pipeline``, built without
arguments; anything that stops it is one ``ConfigError`` line naming the target."""

from __future__ import annotations

import importlib
import inspect
import os
import sys

from .._errors import ConfigError
from .._processor import Processor
from .._stages import Pipeline, Plan, plan
from ..sinks import PostgresSink

__all__ = ["load_plan", "load_processor"]


def load_processor(target: str, app_dir: str | None = None) -> Processor | PostgresSink | Pipeline:
    """An instance of the ``Processor`` subclass ``package.module:ClassName``, its module
    looked for in ``app_dir`` first when given (``eosflow run`` gives the current folder,
    as ``python -m`` and uvicorn's ``--app-dir`` do: the installed ``eosflow`` script's
    own folder is what Python puts first otherwise); anything that stops it being built
    is a ``ConfigError`` naming ``target``."""
    module_name, sep, class_name = target.partition(":")
    if not sep or not module_name or not class_name:
        raise ConfigError(f"target must look like package.module:ClassName, got {target!r}")
    if app_dir is not None:
        folder = os.path.abspath(app_dir)
        if not os.path.isdir(folder):
            raise ConfigError(f"--app-dir {app_dir!r} is not a folder")
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module's own code may raise anything
        raise ConfigError(
            f"cannot import {module_name!r} for {target!r}: {_describe(exc)}"
        ) from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, (Processor, PostgresSink, Pipeline))):
        raise ConfigError(
            f"{target!r} is not an eosflow.Processor subclass (or a Pipeline, a PostgresSink)"
        )
    needed = _required_parameters(cls)
    if needed:
        raise ConfigError(
            f"{target!r} cannot be built without arguments: its __init__ needs "
            f"{', '.join(needed)} (eosflow run calls {class_name}())"
        )
    try:
        return cls()
    except Exception as exc:
        raise ConfigError(f"{target!r} failed to build: {_describe(exc)}") from None


def load_plan(target: str, app_dir: str | None, group_id: str) -> Plan:
    """The checked graph of the ``Pipeline`` ``target`` under ``group_id`` (``eosflow
    topology``, ``eosflow status``); a ``ConfigError`` if ``target`` is no pipeline."""
    pipeline = load_processor(target, app_dir)
    if not isinstance(pipeline, Pipeline):
        raise ConfigError(f"{target!r} is a {type(pipeline).__name__}, not a Pipeline")
    return plan(pipeline, group_id)


def _required_parameters(cls: type) -> list[str]:
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # no signature to read: calling it will tell
        return []
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in params if p.default is p.empty and p.kind not in variadic]


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if text.startswith(name + ": "):  # some libraries (aiokafka) put the name in str()
        text = text[len(name) + 2 :]
    return f"{name}: {text}" if text else name
