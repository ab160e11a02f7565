"""The schema registry's client: its Confluent-compatible REST API, over httpx.

Three calls, each cached for the life of the app:

- ``register(subject, kind, text)``: ``POST /subjects/{subject}/versions``, the id the
  registry gives (an identical schema gets its existing id back; a schema the subject's
  compatibility rule refuses is ``IncompatibleSchemaError``, HTTP 409, once asked twice:
  a first 409 may be another instance creating the subject at the same moment);
- ``lookup(subject, kind, text)``: ``POST /subjects/{subject}``, the id of a schema
  registered already (not there: ``SchemaRegistryError`` saying so -- for
  ``auto_register`` off);
- ``schema(id)``: ``GET /schemas/ids/{id}``, the schema a record was written with,
  fetched once per id whatever the number of records naming it (concurrent asks share
  one request); an id the registry does not know is ``None`` (that record does not
  decode), and is not asked again.

Failure modes: a server certificate that does not verify is a ``SchemaRegistryError``
at once (no retry mends it); a connection error, a timeout (``request_timeout_s``), a
5xx or 429 is retried with a backoff growing from 0.1 s to 2 s for ``retry_timeout_s``; past it,
``SchemaRegistryError`` (never a record let through undecoded). Any other refusal
(401/403, 404, 409, 422) is raised at once, with the registry's own message. httpx's
errors are mapped here and nowhere else; an error names the URL (credentials are never
in it: ``SchemaRegistrySettings`` refuses them there) and never the password.

``requests`` counts the HTTP requests sent (the tests read it: an id fetched once).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .._errors import ConfigError, IncompatibleSchemaError, SchemaRegistryError
from ._settings import SchemaRegistrySettings, needs

if TYPE_CHECKING:
    import httpx

_CONTENT = "application/vnd.schemaregistry.v1+json"
_BACKOFF_S, _BACKOFF_MAX_S = 0.1, 2.0
_RETRIED = frozenset({429, 500, 502, 503, 504})


class _Refused(Exception):
    def __init__(self, status: int, code: int | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Registry:
    """One registry's client, shared by every codec of an app (see the module doc)."""

    def __init__(self, settings: SchemaRegistrySettings) -> None:
        if settings.url is None:
            raise ConfigError("schema registry settings: url is not set")
        self._httpx = needs("httpx")
        self.url = settings.url
        self._settings = settings
        self._http: httpx.AsyncClient | None = None
        self._ids: dict[tuple[str, str, str], int] = {}
        self._schemas: dict[int, asyncio.Task[tuple[str, str] | None]] = {}
        self.requests = 0

    @property
    def auto_register(self) -> bool:
        return self._settings.auto_register

    async def register(self, subject: str, kind: str, text: str) -> int:
        """The id of ``text`` under ``subject``, registering it if it is not there."""
        key = (subject, kind, text)
        if key not in self._ids:
            path = f"/subjects/{quote(subject, safe='')}/versions"
            for last in (False, True):
                try:
                    body = await self._call("POST", path, _schema_body(kind, text), subject)
                    break
                except _Refused as exc:
                    # A 409 may be a race, not a refusal: instances starting together
                    # create a new subject at once, and the registry answers all but
                    # one "already exists" (Apicurio). Asked again, the subject exists
                    # and the answer is its id, or a true incompatibility.
                    if exc.status == 409 and last:
                        raise IncompatibleSchemaError(self.url, subject, exc.message) from None
                    if exc.status != 409:
                        raise self._refused(
                            f"registering a schema under {subject!r}", exc
                        ) from None
            self._ids[key] = int(body["id"])
        return self._ids[key]

    async def lookup(self, subject: str, kind: str, text: str) -> int:
        """The id of ``text`` registered under ``subject`` already."""
        key = (subject, kind, text)
        if key not in self._ids:
            path = f"/subjects/{quote(subject, safe='')}?normalize=true"
            try:
                body = await self._call("POST", path, _schema_body(kind, text), subject)
            except _Refused as exc:
                if exc.status == 404:
                    raise SchemaRegistryError(
                        f"schema registry {self.url}: the schema is not registered under "
                        f"{subject!r} ({exc.message}); register it, or set auto_register "
                        "(EOSFLOW_SCHEMA_REGISTRY_AUTO_REGISTER=true)"
                    ) from None
                raise self._refused(f"looking up the schema of {subject!r}", exc) from None
            self._ids[key] = int(body["id"])
        return self._ids[key]

    async def schema(self, schema_id: int) -> tuple[str, str] | None:
        """``(kind, text)`` of the schema ``schema_id`` (kind ``AVRO``, ``JSON`` or
        ``PROTOBUF``), or None if the registry does not know it."""
        task = self._schemas.get(schema_id)
        if task is None:
            task = self._schemas[schema_id] = asyncio.ensure_future(self._fetch(schema_id))
        try:
            return await asyncio.shield(task)
        except SchemaRegistryError:
            self._schemas.pop(schema_id, None)  # a later record asks again
            raise

    async def _fetch(self, schema_id: int) -> tuple[str, str] | None:
        try:
            body = await self._call("GET", f"/schemas/ids/{schema_id}", None, f"id {schema_id}")
        except _Refused as exc:
            if exc.status == 404:
                return None
            raise self._refused(f"fetching schema id {schema_id}", exc) from None
        return str(body.get("schemaType") or "AVRO"), str(body["schema"])

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        for task in self._schemas.values():
            task.cancel()

    def _refused(self, what: str, exc: _Refused) -> SchemaRegistryError:
        hint = " (check username and password)" if exc.status in (401, 403) else ""
        return SchemaRegistryError(
            f"schema registry {self.url} refused {what}: HTTP {exc.status}"
            f"{f' error {exc.code}' if exc.code is not None else ''}: {exc.message}{hint}"
        )

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            s = self._settings
            auth = None
            if s.username is not None and s.password is not None:
                auth = self._httpx.BasicAuth(s.username, s.password.get_secret_value())
            verify: ssl.SSLContext | bool = True
            if s.url is not None and s.url.startswith("https:"):
                verify = ssl.create_default_context(
                    cafile=str(s.ssl_cafile) if s.ssl_cafile else None
                )
                if s.ssl_certfile is not None and s.ssl_keyfile is not None:
                    verify.load_cert_chain(str(s.ssl_certfile), str(s.ssl_keyfile))
            self._http = self._httpx.AsyncClient(
                auth=auth,
                verify=verify,
                timeout=s.request_timeout_s,
                headers={"Accept": _CONTENT, "Content-Type": _CONTENT},
            )
        return self._http

    async def _call(self, method: str, path: str, body: Any, about: str) -> dict[str, Any]:
        """The JSON answer of one request, retried while the registry does not answer;
        ``_Refused`` for an answer that says no."""
        deadline = time.monotonic() + self._settings.retry_timeout_s
        backoff, attempts = _BACKOFF_S, 0
        while True:
            attempts += 1
            self.requests += 1
            try:
                answer: httpx.Response = await self._client().request(
                    method, self.url + path, json=body
                )
            except self._httpx.HTTPError as exc:  # connect, read, timeouts, protocol
                if (why := _untrusted(exc)) is not None:  # no retry mends a certificate
                    raise SchemaRegistryError(
                        f"schema registry {self.url}: its certificate is not trusted ({why}); "
                        "set ssl_cafile to the CA that signed it"
                    ) from None
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if answer.status_code < 300:
                    parsed = answer.json()
                    return parsed if isinstance(parsed, dict) else {"value": parsed}
                code, message = _reason(answer)
                if answer.status_code not in _RETRIED:
                    raise _Refused(answer.status_code, code, message)
                last = f"HTTP {answer.status_code}: {message}"
            if time.monotonic() + backoff > deadline:
                raise SchemaRegistryError(
                    f"schema registry {self.url} did not answer ({about}) within "
                    f"{self._settings.retry_timeout_s:g} s, {attempts} attempt(s): {last}"
                )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)


def _untrusted(exc: BaseException) -> str | None:
    """The reason, if ``exc`` comes of the server's certificate failing verification."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return str(seen.verify_message or seen.reason or seen)
        if "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return "certificate verify failed"
        seen = seen.__cause__ or seen.__context__
    return None


def _schema_body(kind: str, text: str) -> dict[str, str]:
    body = {"schema": text}
    if kind != "AVRO":  # Avro is the API's default and older registries know no schemaType
        body["schemaType"] = kind
    return body


def _reason(answer: httpx.Response) -> tuple[int | None, str]:
    """The registry's ``error_code`` and ``message`` (one line), or the body's start."""
    try:
        body = answer.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and "message" in body:
        code = body.get("error_code")
        return (code if isinstance(code, int) else None), " ".join(str(body["message"]).split())
    return None, " ".join(answer.text[:200].split()) or answer.reason_phrase
