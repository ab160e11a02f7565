"""``SchemaRegistrySettings``: where the schema registry is and how to reach it.

Read from ``EOSFLOW_SCHEMA_REGISTRY_*`` variables (``eosflow run`` takes them as the rest
of its environment), or built in code and set as a processor's ``schema_registry``.

- ``url``: the registry's Confluent-compatible API (Confluent's registry at its root,
  Apicurio's under ``/apis/ccompat/v7``). Credentials in the URL are refused: they
  would reach every log line and error that names it; ``username`` and ``password``
  carry them (HTTP basic auth) and ``password`` is a ``SecretStr``.
- TLS: an ``https`` URL is verified against ``ssl_cafile`` (else the system's store);
  ``ssl_certfile`` + ``ssl_keyfile`` for mutual TLS.
- ``auto_register`` (default on): an output's schema is registered under its subject
  at start (a compatibility refusal stops the app there, naming the subject); off, it
  must be registered already, and is only looked up.
- ``request_timeout_s`` bounds one request; ``retry_timeout_s`` how long a registry that
  does not answer (or answers 5xx/429) is retried with a growing backoff before the app
  stops on ``SchemaRegistryError`` -- running out of retries is an error, never a
  record passed over.
"""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import ClassVar
from urllib.parse import urlsplit

from pydantic import Field, FilePath, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from .._errors import ConfigError
from .._security import OneLineSettings

ENV_PREFIX = "EOSFLOW_SCHEMA_REGISTRY_"


class SchemaRegistrySettings(OneLineSettings):
    """How to reach the schema registry (see the module doc); frozen, validated on
    construction with eosflow's one-line errors. ``from_environment()`` reads
    ``EOSFLOW_SCHEMA_REGISTRY_*`` and refuses a variable of that prefix that names no
    field (a misspelt setting is never ignored)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")
    what: ClassVar[str] = "schema registry settings"

    url: str | None = Field(
        default=None, description="the registry's Confluent-compatible API, http(s)://..."
    )
    username: str | None = Field(default=None, description="HTTP basic auth user")
    password: SecretStr | None = Field(default=None, description="HTTP basic auth password")
    ssl_cafile: FilePath | None = Field(
        default=None, description="PEM file of the CA(s) to trust; default: the system's"
    )
    ssl_certfile: FilePath | None = Field(default=None, description="client certificate")
    ssl_keyfile: FilePath | None = Field(default=None, description="its private key")
    auto_register: bool = Field(
        default=True,
        description="register outputs' schemas at start (off: they must be registered)",
    )
    request_timeout_s: float = Field(default=10.0, gt=0, description="one request's bound")
    retry_timeout_s: float = Field(
        default=30.0, ge=0, description="how long an unanswering registry is retried"
    )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SchemaRegistrySettings:
        environ = os.environ if environ is None else environ
        known = [ENV_PREFIX + name.upper() for name in cls.model_fields]
        for var in sorted(environ):
            upper = var.upper()
            if upper.startswith(ENV_PREFIX) and upper not in known:
                close = difflib.get_close_matches(upper, known, n=1)
                hint = f"did you mean {close[0]}?" if close else f"the settings: {known}"
                raise ConfigError(f"unknown setting {var}; {hint}")
        return cls()

    @field_validator("url")
    @classmethod
    def _plain_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected http(s)://host[:port][/path]")
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "credentials in the URL are refused (they would be logged): "
                "set username and password instead"
            )
        return value.rstrip("/")

    @model_validator(mode="after")
    def _consistent(self) -> SchemaRegistrySettings:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password: give both or neither")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile: give both or neither")
        tls_files = self.ssl_cafile or self.ssl_certfile
        if tls_files and self.url is not None and not self.url.startswith("https:"):
            raise ValueError("ssl_* files given for a plain http:// url")
        return self


def needs(module: str) -> ModuleType:
    """``module`` imported, or the one-line ``ConfigError`` saying what to install (the
    schema registry's libraries are the ``schemas`` extra, not eosflow's own)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"schema registry declarations need {module}: pip install 'eosflow[schemas]'"
        ) from None
