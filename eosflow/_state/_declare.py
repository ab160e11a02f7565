"""What a processor declares of state: its stores (``stores``), with its windows and
timers as stores of bytes, and what a ``process_batch`` cannot keep. Checked once, at
start, each mistake a one-line ``ConfigError``."""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import ConfigError
from .._schemas import Schemaful
from ._batch import check_batch
from ._store import BYTES, Serde
from ._time import declared_windows, overrides
from ._timers import STORE as TIMERS


def declared(processor: object) -> dict[str, Serde | Schemaful]:
    """The stores ``processor`` (a ``Processor``) declares (its ``stores`` mapping: name
    -> Serde, None meaning bytes, or a registry's schema such as ``eosflow.Avro(M)``,
    which ``_typed.Typing`` binds to the app's registry), checked: a one-line
    ``ConfigError`` for anything else. Its windowed stores (``windows``) are stores of
    bytes here."""
    raw = getattr(processor, "stores", None) or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{type(processor).__name__}.stores must map store names to serializers "
            f"(e.g. {{'counts': eosflow.JSON}}), not {type(raw).__name__}"
        )
    out: dict[str, Serde | Schemaful] = {}
    for name, serde in raw.items():
        serde = BYTES if serde is None else serde
        if not isinstance(name, str) or not isinstance(serde, (Serde, Schemaful)):
            raise ConfigError(
                f"{type(processor).__name__}.stores[{name!r}]: expected a store name and a "
                f"Serde (an object with dumps and loads, e.g. eosflow.JSON) or a registry's "
                f"schema (eosflow.Avro(M)), got {serde!r}"
            )
        out[name] = serde
    for name in declared_windows(processor):
        out[name] = BYTES
    if has_timers(processor):
        if TIMERS in out:
            raise ConfigError(
                f"{type(processor).__name__} has timers (it overrides fire), which keep "
                f"the store {TIMERS!r}: name its store or window otherwise"
            )
        out[TIMERS] = BYTES
    return out


def has_timers(processor: object) -> bool:
    """Whether ``processor`` overrides ``Processor.fire`` (then it has timers)."""
    return overrides(processor, "fire")


def copartitioned(processor: object) -> bool:
    """``processor.copartitioned``, checked: a one-line ``ConfigError`` unless a bool."""
    value = getattr(processor, "copartitioned", False)
    if not isinstance(value, bool):
        raise ConfigError(
            f"{type(processor).__name__}.copartitioned must be True or False, not {value!r}"
        )
    return value


def batch_ready(processor: object, batch: bool) -> None:
    """A one-line ``ConfigError`` when ``processor`` overrides ``process_batch``
    (``batch``) and declares state a batch cannot keep (``_batch.check_batch``)."""
    if not batch:
        return
    check_batch(type(processor).__name__, declared_windows(processor), has_timers(processor))
    if getattr(processor, "tables", None):
        raise ConfigError(
            f"{type(processor).__name__} declares tables and overrides process_batch: "
            "tables are read per record (their rows must be applied in timestamp order "
            "between the records); use process()"
        )
    stores = getattr(processor, "stores", None) or {}
    if isinstance(stores, Mapping) and any(isinstance(s, Schemaful) for s in stores.values()):
        raise ConfigError(
            f"{type(processor).__name__} keeps a store in a registry's schema and overrides "
            "process_batch: such a store is read per record (a value's schema is fetched "
            "between the records); use process()"
        )
    if copartitioned(processor):
        raise ConfigError(
            f"{type(processor).__name__} is copartitioned and overrides process_batch: "
            "co-partitioned inputs are taken per record, in timestamp order; use process()"
        )
