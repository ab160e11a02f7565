"""The schema-registry room: topic sides declared as ``Avro``, ``JsonSchema`` or
``Protobuf``, their schemas kept in a registry and their records in the Confluent wire
format. The typed records' room (``_typed``) binds each declaration to the app's ``Registry`` and a
subject, prepares the outputs' schemas at start and awaits ``NeedsSchema.fetch`` when a
record names a schema id not seen yet; nothing else reaches in here.

- ``_settings``: ``SchemaRegistrySettings`` (``EOSFLOW_SCHEMA_REGISTRY_*``);
- ``_client``: ``Registry``, the REST client (register, look up, fetch by id; cached;
  retried for ``retry_timeout_s``; httpx's errors mapped into eosflow's);
- ``_wire``: the wire format's header, and Protobuf's message indexes;
- ``_codec``: ``Schemaful`` (a declaration), ``SchemaCodec`` (bound), ``NeedsSchema``;
- ``_avro``: ``Avro`` (fastavro) and ``avro_schema_of`` (a model's Avro schema);
- ``_json``: ``JsonSchema``;
- ``_protobuf``: ``Protobuf`` and ``proto_text_of`` (a message's ``.proto`` file as text),
  ``messages_in`` (the message types a schema declares, by their message indexes).
"""

from ._avro import Avro, avro_schema_of
from ._client import Registry
from ._codec import NeedsSchema, SchemaCodec, Schemaful
from ._json import JsonSchema
from ._protobuf import Protobuf, messages_in, proto_text_of
from ._settings import SchemaRegistrySettings

__all__ = [
    "Avro",
    "JsonSchema",
    "NeedsSchema",
    "Protobuf",
    "Registry",
    "SchemaCodec",
    "SchemaRegistrySettings",
    "Schemaful",
    "avro_schema_of",
    "messages_in",
    "proto_text_of",
]
