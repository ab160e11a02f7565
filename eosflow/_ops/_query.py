"""What ``GET /state/<store>/<key>`` answers: a store's committed value of a key, as JSON.

The key is everything after the store's name and its slash, percent-decoded to bytes
(``/state/counts/user%201`` asks for ``b"user 1"``, ``/state/counts/a/b`` for ``b"a/b"``,
``/state/counts/`` for the empty key). The answer comes from the committed local copies of the
partitions this instance holds (``Stores.read_committed``): never a value of the open
transaction, which may still abort. Read on the app's event loop (the server's thread
hands the read over and waits at most ``WAIT_S``), so a local copy is never read while a
rebalance closes it. A table's row in a registry's schema not fetched yet has the schema
fetched on the loop first, then is read again.

- 200: ``{"store", "key", "values": [{"topic", "partition", "value"}]}`` -- one entry
  per held partition whose store has the key (a keyed input has one); a value the
  store's serde gives as bytes is ``"value_base64"`` instead, a pydantic model as its
  fields (JSON mode); what JSON cannot hold inside a value (bytes, other objects) is
  given as its ``str()``;
- 404: ``{"error": "..."}`` in one line -- no such store (the declared ones are named),
  or the key is in none of the partitions held here (they are named: another instance
  holds the rest);
- 503: a partition held here is still restoring, none is held (before the first
  assignment, during an eager rebalance, after the stop), the app is not running, or
  its loop did not answer within ``WAIT_S``;
- 500: the value could not be read or given as JSON (a serde that fails, a NaN), in one
  line.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from pydantic import BaseModel

from .._errors import SchemaPending
from .._records import Partition

Found = tuple[list[tuple[Partition, Any]], list[Partition], list[Partition]]
Read = Callable[[str, bytes], Found]
Answer = tuple[int, str, bytes]

PREFIX = "/state/"
WAIT_S = 2.0
_JSON = "application/json"


class StateQueries:
    """``answer(path)`` from the server's thread; ``serve(read, loop)`` once the app runs
    (``read``: ``Stores.read_committed``), ``stop()`` when it ends."""

    def __init__(self) -> None:
        self._read: Read | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def serve(self, read: Read, loop: asyncio.AbstractEventLoop) -> None:
        self._read, self._loop = read, loop

    def stop(self) -> None:
        self._read = self._loop = None

    def answer(self, path: str) -> Answer:
        name, slash, raw_key = path[len(PREFIX) :].partition("/")
        if not name or not slash:
            return _error(404, "ask for /state/<store>/<key>")
        read, loop = self._read, self._loop
        if read is None or loop is None:
            return _error(503, "the app is not running")
        key = unquote_to_bytes(raw_key)
        done: concurrent.futures.Future[Found] = concurrent.futures.Future()

        def on_loop() -> None:
            try:
                done.set_result(read(name, key))
            except SchemaPending as pending:  # a row or value in a schema not fetched yet
                pending.pending.add_done_callback(fetched)
            except BaseException as exc:
                done.set_exception(exc)

        def fetched(fetch: asyncio.Future[None]) -> None:  # read again (the id known now)
            if fetch.cancelled():
                failed: BaseException | None = RuntimeError("stopped while fetching a schema")
            else:
                failed = fetch.exception()
            if failed is None:
                on_loop()
            else:
                done.set_exception(failed)

        try:
            loop.call_soon_threadsafe(on_loop)
        except RuntimeError:  # the loop closed
            return _error(503, "the app is not running")
        try:
            found, restoring, held = done.result(WAIT_S)
        except KeyError as exc:
            return _error(404, str(exc.args[0]))
        except concurrent.futures.TimeoutError:
            return _error(503, f"the app's event loop did not answer within {WAIT_S:g} s")
        except Exception as exc:  # a serde that fails, a local copy that cannot be read
            return _error(500, f"reading {name!r}: {type(exc).__name__}: {exc}")
        shown = key.decode("utf-8", "backslashreplace")
        if found:
            values = [{"topic": t, "partition": p, **_value(v)} for (t, p), v in found]
            body = {"store": name, "key": shown, "values": values}
            try:
                text = json.dumps(body, default=str, allow_nan=False)
            except (TypeError, ValueError) as exc:  # NaN, keys JSON cannot hold
                return _error(500, f"the value of {shown!r} in {name!r} is not JSON: {exc}")
            return 200, _JSON, text.encode() + b"\n"
        if restoring:
            where = ", ".join(f"{t}[{p}]" for t, p in restoring)
            return _error(503, f"{where} still restoring; ask again")
        if not held:
            return _error(503, "no partition is held here now; ask again")
        where = ", ".join(f"{t}[{p}]" for t, p in held) or "none"
        return _error(
            404, f"key {shown!r} is not in store {name!r} of the partitions held here ({where})"
        )


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, (bytes, bytearray)):
        return {"value_base64": base64.b64encode(value).decode()}
    if isinstance(value, BaseModel):  # a store's or table's model: its fields
        return {"value": value.model_dump(mode="json")}
    return {"value": value}


def _error(status: int, why: str) -> Answer:
    return status, _JSON, json.dumps({"error": why}).encode() + b"\n"
