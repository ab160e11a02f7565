"""Schema-registry declarations without a registry: a model's Avro schema, the wire
format's header refused when absent, the settings' one-line refusals (never showing a
password), and a registry that does not answer ending in an error once its retries run
out. The comment above each test names the mutation it caught."""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import io
import socket
from typing import Literal

import fastavro
import pytest
from pydantic import BaseModel

import eosflow
from eosflow._errors import SchemaPending
from eosflow._schemas import Registry, avro_schema_of
from eosflow._state import batch_ready, declared
from eosflow._typed import Typing


class Kind(enum.StrEnum):
    RETAIL = "retail"
    TRADE = "trade"


class Line(BaseModel):
    sku: str
    qty: int
    price: float


class Order(BaseModel):
    id: int
    at: dt.datetime
    kind: Kind
    lines: list[Line]
    tags: dict[str, str] = {}
    note: str | None = None
    rush: bool = False
    channel: Literal["web", "shop"] = "web"


def nowhere() -> str:
    """A URL on 127.0.0.1 where nothing listens (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# A model's Avro schema, every type the derivation takes. Caught: optional fields without
# null first (then their default null is not a valid Avro default).
def test_a_models_avro_schema_is_derived_and_round_trips() -> None:
    schema = avro_schema_of(Order)
    fields = {f["name"]: f for f in schema["fields"]}
    assert fields["id"]["type"] == "long"
    assert fields["at"]["type"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert fields["kind"]["type"] == {
        "type": "enum",
        "name": "Kind",
        "symbols": ["retail", "trade"],
    }
    assert fields["lines"]["type"]["items"]["name"] == "Line"
    assert fields["tags"]["type"] == {"type": "map", "values": "string"}
    assert fields["note"] == {"name": "note", "type": ["null", "string"], "default": None}
    assert fields["rush"]["default"] is False
    assert fields["channel"]["type"]["symbols"] == ["web", "shop"]
    parsed = fastavro.parse_schema(schema)  # a valid schema, defaults included
    order = Order(
        id=7,
        at=dt.datetime(2026, 12, 2, 8, 30, 1, 250, tzinfo=dt.UTC),
        kind=Kind.TRADE,
        lines=[Line(sku="a", qty=2, price=1.5)],
        tags={"src": "pos"},
    )
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, order.model_dump())
    out.seek(0)
    assert Order.model_validate(fastavro.schemaless_reader(out, parsed)) == order


def test_a_type_without_an_avro_form_is_one_line_naming_the_field() -> None:
    class Odd(BaseModel):
        id: int
        ratio: complex

    with pytest.raises(eosflow.ConfigError, match=r"Odd\.ratio is <class 'complex'>.*schema="):
        avro_schema_of(Odd)


# A record without the wire format's header does not decode, naming why. Caught: the
# magic byte not checked (an unframed JSON body's first bytes read as a schema id,
# then asked of a registry that is not there).
def test_a_record_without_the_header_does_not_decode() -> None:
    settings = eosflow.SchemaRegistrySettings(url=nowhere())
    typing = Typing(
        "Shop", {"orders": eosflow.Topic(value=eosflow.Avro(Order))}, ("orders",), {}, settings
    )

    async def process(record: eosflow.Record) -> None:
        raise AssertionError("not decoded: never processed")

    record = eosflow.Record("orders", 0, 5, b"k", b'{"id": 1}', (), 1)
    with pytest.raises(eosflow.DecodeError, match="magic byte 123, not 0") as caught:
        asyncio.run(typing.decoding(process)(record))  # type: ignore[arg-type]
    assert caught.value.field == "value"
    assert caught.value.expected == "Order"


def test_a_declaration_without_a_registry_is_one_line() -> None:
    with pytest.raises(
        eosflow.ConfigError, match=r"Shop.topics\['orders'\].value is .*EOSFLOW_SCHEMA_REGISTRY_URL"
    ):
        Typing("Shop", {"orders": eosflow.Topic(value=eosflow.JsonSchema(Order))}, ("orders",))


# A table's rows in a registry's schema: one line without a registry, the table bound
# under <topic>-value with the processor's own Table left as it was; a serde that is
# neither a Serde nor a schema is one line naming the table.
def test_a_tables_schema_is_bound_to_the_registry_or_refused_in_one_line() -> None:
    table = eosflow.Table("customers", serde=eosflow.Avro(Order))
    with pytest.raises(
        eosflow.ConfigError,
        match=r"^Shop.tables\['c'\].serde is eosflow.Avro\(Order\): a schema registry is needed",
    ):
        Typing("Shop", {}, ("orders",), {"c": table})
    settings = eosflow.SchemaRegistrySettings(url=nowhere())
    typing = Typing("Shop", {}, ("orders",), {"c": table}, settings)
    bound = typing.tables["c"].serde
    assert "under 'customers-value'" in repr(bound) and hasattr(bound, "loads")
    assert isinstance(table.serde, eosflow.Avro)  # the processor's own is left as it is
    with pytest.raises(eosflow.ConfigError, match=r"^eosflow.GlobalTable\('t'\): serde must"):
        eosflow.GlobalTable("t", serde=Order)  # type: ignore[arg-type]


# A store's values in a registry's schema: bound under <group>--<store>--changelog-value,
# one line without a registry, refused with process_batch (read per record), and other
# stores left as declared.
def test_a_stores_schema_is_bound_under_its_changelogs_subject_or_refused() -> None:
    class Shop(eosflow.Processor):
        stores = {"last": eosflow.Avro(Order), "n": eosflow.JSON}

    stores = declared(Shop())
    with pytest.raises(
        eosflow.ConfigError,
        match=r"^Shop.stores\['last'\] is eosflow.Avro\(Order\): a schema registry is needed",
    ):
        Typing("Shop", {}, ("orders",), stores=stores, group="shop")
    settings = eosflow.SchemaRegistrySettings(url=nowhere())
    typing = Typing("Shop", {}, ("orders",), None, settings, stores=stores, group="shop")
    assert "under 'shop--last--changelog-value'" in repr(typing.stores["last"])
    assert typing.stores["n"] is eosflow.JSON

    class Batched(Shop):
        async def process_batch(self, records: object) -> list[eosflow.Output]:
            return []

    with pytest.raises(eosflow.ConfigError, match=r"^Batched keeps a store in a registry's"):
        batch_ready(Batched(), True)
    with pytest.raises(eosflow.ConfigError, match=r"or a registry's schema"):

        class Wrong(eosflow.Processor):
            stores = {"x": Order}  # a model class is neither

        declared(Wrong())


# A store's value naming a schema not fetched yet aborts the transaction only once the
# fetch is done (so the redo finds the id known). Caught: stores not counted among the
# reads that need the wait (the abort at once, the fetch still pending).
def test_a_stores_schema_fetch_is_awaited_before_the_abort() -> None:
    class Shop(eosflow.Processor):
        stores = {"last": eosflow.Avro(Order)}

    settings = eosflow.SchemaRegistrySettings(url=nowhere())
    typing = Typing("Shop", {}, ("orders",), None, settings, stores=declared(Shop()), group="g")

    async def main() -> None:
        fetched: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def process(record: eosflow.Record) -> None:
            raise SchemaPending(5, fetched)  # as a store's read raises it

        wrapped = typing.decoding(process)
        task = asyncio.ensure_future(wrapped(eosflow.Record("orders", 0, 0, b"k", b"v")))
        done, _ = await asyncio.wait([task], timeout=0.2)
        assert not done, "aborted before the schema was fetched"
        fetched.set_result(None)
        with pytest.raises(SchemaPending):
            await task

    asyncio.run(main())


# Credentials never ride in a URL (they would be in every line naming it), and the
# password is never shown. Caught: the userinfo check removed.
def test_credentials_in_the_url_are_refused_and_the_password_never_shown() -> None:
    with pytest.raises(eosflow.ConfigError) as caught:
        eosflow.SchemaRegistrySettings(url="https://bob:hunter2@registry:8081")
    assert "credentials in the URL are refused" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    settings = eosflow.SchemaRegistrySettings(
        url="https://registry:8081/", username="bob", password="hunter2"
    )
    assert settings.url == "https://registry:8081"
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)
    with pytest.raises(eosflow.ConfigError, match="username and password: give both"):
        eosflow.SchemaRegistrySettings(url="http://r:1", username="bob")


# A registry that does not answer is retried, then an error -- never a success. Caught:
# the deadline check returning the last answer instead of raising. (The budget leaves
# room for a loaded host: with 0.6 s, a CI run's first request, the HTTP client's start
# included, took it all.)
async def test_a_registry_that_does_not_answer_is_an_error_once_retries_run_out() -> None:
    url = nowhere()
    registry = Registry(eosflow.SchemaRegistrySettings(url=url, retry_timeout_s=2.0))
    try:
        with pytest.raises(eosflow.SchemaRegistryError) as caught:
            await registry.register("orders-value", "AVRO", '"string"')
    finally:
        await registry.close()
    message = str(caught.value)
    assert f"schema registry {url} did not answer" in message
    assert "within 2 s" in message
    assert registry.requests >= 3  # retried (0.1 + 0.2 + 0.4 s of backoff fit in 2 s)
    assert isinstance(caught.value, eosflow.FatalError)


def test_an_output_codec_writes_nothing_before_its_schema_is_registered() -> None:
    settings = eosflow.SchemaRegistrySettings(url=nowhere())
    typing = Typing(
        "Shop", {"out": eosflow.Topic(value=eosflow.Avro(Line))}, ("orders",), {}, settings
    )
    with pytest.raises(TypeError, match="no registered schema"):
        typing.encode(eosflow.Output("out", Line(sku="a", qty=1, price=1.0)))


# Basic auth: the credentials go in the Authorization header, and a refusal is one line
# that names the registry and the setting, never the password -- nor does any log line.
# (The server is a stand-in for an authenticating proxy in front of a registry: the
# test kit's Apicurio authenticates with OIDC only.) Caught: the auth not passed to the
# client (no header sent).
async def test_basic_auth_is_sent_and_a_refusal_never_shows_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import base64
    import http.server
    import threading

    seen: list[str | None] = []

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.headers.get("Authorization"))
            body = b'{"error_code": 401, "message": "Unauthorized"}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    settings = eosflow.SchemaRegistrySettings(url=url, username="bob", password="hunter2")
    registry = Registry(settings)
    caplog.set_level("DEBUG")
    try:
        with pytest.raises(eosflow.SchemaRegistryError) as caught:
            await registry.register("orders-value", "AVRO", '"string"')
    finally:
        await registry.close()
        server.shutdown()
        server.server_close()
    assert seen == ["Basic " + base64.b64encode(b"bob:hunter2").decode()]
    message = str(caught.value)
    assert message.startswith(f"schema registry {url} refused registering a schema")
    assert "HTTP 401 error 401: Unauthorized (check username and password)" in message
    assert "hunter2" not in message and "aHVudGVyMg" not in message
    assert not [r for r in caplog.records if "hunter2" in r.getMessage()]


# A misspelt EOSFLOW_SCHEMA_REGISTRY_* variable is one line naming the closest setting,
# never ignored. Caught: the check skipped (the settings built without the URL, and the
# error then said the URL was missing).
def test_a_misspelt_registry_variable_is_refused_naming_the_closest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EOSFLOW_SCHEMA_REGISTRY_URLL", "http://r:8081")
    with pytest.raises(
        eosflow.ConfigError,
        match=r"^unknown setting EOSFLOW_SCHEMA_REGISTRY_URLL; did you mean "
        r"EOSFLOW_SCHEMA_REGISTRY_URL\?$",
    ):
        Typing("Shop", {"orders": eosflow.Topic(value=eosflow.Avro(Order))}, ("orders",))
