"""``eosflow.JsonSchema``: a topic side as JSON, its JSON Schema in the registry.

The body after the header is plain JSON. With a model, decoding is the model's own
validated parse of it (``model_validate_json``) and the registered schema is the
model's (``model_json_schema()``) unless one is given; without a model, values are
what ``json.loads`` gives, validated against the declared schema (``jsonschema``).
The writer's schema is fetched by its id once, as for Avro, so a record naming an id
the registry does not know, or a schema of another kind, does not decode; the body is
checked against the declared schema or model -- the reader's -- which is the one this
app relies on.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from .._errors import ConfigError
from ._client import Registry
from ._codec import Reader, SchemaCodec, Schemaful
from ._wire import HEADER_SIZE


class JsonSchema(Schemaful):
    """A topic's key or value as JSON with a JSON Schema in the registry:
    ``JsonSchema(Order)`` (the model's schema), ``JsonSchema(Order, schema=...)`` or
    ``JsonSchema(schema=...)`` (values as JSON objects, validated)."""

    kind = "JSON"

    def bind(self, registry: Registry, subject: str, where: str) -> SchemaCodec:
        if self.schema is None:
            assert self.model is not None
            declared = self.model.model_json_schema()
        else:
            try:
                declared = json.loads(self.schema) if isinstance(self.schema, str) else self.schema
            except ValueError as exc:
                raise ConfigError(f"{where}: not a JSON Schema: {exc}") from None
        return _JsonCodec(self, registry, subject, declared, where)


class _JsonCodec(SchemaCodec):
    def __init__(
        self,
        declared: JsonSchema,
        registry: Registry,
        subject: str,
        schema: dict[str, Any],
        where: str,
    ) -> None:
        super().__init__(declared, registry, subject, json.dumps(schema, separators=(",", ":")))
        model = declared.model
        if model is not None:
            validate_json = model.__pydantic_validator__.validate_json

            def parse(body: bytes) -> Any:
                return validate_json(body)

        else:
            try:
                import jsonschema
            except ImportError:
                raise ConfigError(
                    f"{where}: JSON Schema without a model needs jsonschema: "
                    "pip install 'eosflow[schemas]'"
                ) from None
            try:
                kind = jsonschema.validators.validator_for(schema)
                kind.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ConfigError(f"{where}: not a JSON Schema: {exc.message}") from None
            validator = kind(schema)

            def parse(body: bytes) -> Any:
                value = json.loads(body)
                error = jsonschema.exceptions.best_match(validator.iter_errors(value))
                if error is not None:
                    path = ".".join(str(p) for p in error.absolute_path) or "(root)"
                    raise ValueError(f"{path}: {error.message}")
                return value

        self._parse = parse

    def encode(self, value: Any) -> bytes:
        if isinstance(value, BaseModel):
            return value.__pydantic_serializer__.to_json(value)
        self._parse(raw := json.dumps(value, separators=(",", ":")).encode())
        return raw

    def reader(self, kind: str, text: str) -> Reader:
        parse = self._parse

        def read(data: bytes) -> Any:
            return parse(memoryview(data)[HEADER_SIZE:].tobytes())

        return read
