"""``KafkaSecurity``: how every eosflow client authenticates and encrypts.

One object, part of ``EosConfig`` (``config.security``), read from ``EOSFLOW_*`` variables
and ``eosflow run`` flags like the other settings. The adapter turns it into the
connection settings of every client eosflow creates -- the group consumer, the
transactional producer (and so the adapter's own requests: TxnOffsetCommit, OffsetFetch,
InitProducerId, forced heartbeats travel over their connections), the checker -- so no
connection goes around it.

- ``security_protocol``: PLAINTEXT (the default), SSL, SASL_PLAINTEXT or SASL_SSL.
- TLS (SSL, SASL_SSL): ``ssl_cafile`` to trust a private CA (else the system's store);
  ``ssl_certfile`` + ``ssl_keyfile`` (+ ``ssl_key_password``) for mutual TLS. The broker's
  host name is checked against its certificate unless ``ssl_check_hostname`` is off,
  which is logged as a warning: it lets anyone holding a certificate of that CA pose as
  the broker.
- SASL: ``sasl_mechanism`` PLAIN or SCRAM-SHA-256/512 with ``sasl_username`` and
  ``sasl_password``, or OAUTHBEARER with ``sasl_oauth_token_provider``, a
  ``module:function`` (or, from code, the function itself) returning a token, awaited or
  not, and called again whenever a connection authenticates.

Secrets (``sasl_password``, ``ssl_key_password``) are ``SecretStr``: the config's repr,
logs and eosflow's error messages show ``**********``. Inconsistent settings (a SASL
mechanism on a PLAINTEXT connection, TLS files with no TLS, a missing password) are a
``ConfigError`` naming the setting, rather than being ignored.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    Field,
    FilePath,
    ImportString,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from ._errors import ConfigError

TokenProvider = Callable[[], "str | Awaitable[str]"]

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class OneLineSettings(BaseSettings):
    """eosflow's settings objects (``KafkaSecurity`` here, ``EosConfig`` and
    ``OpsSettings``): built with a bad value or an unknown name, they raise a
    ``ConfigError`` of one line naming each field -- an unknown one with the closest
    valid name -- never pydantic's multi-line ``ValidationError`` (nor a value: a
    secret may be one)."""

    what: ClassVar[str] = "eosflow settings"

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(f"invalid {self.what}: {settings_lines(exc, type(self))}") from None


def settings_lines(exc: ValidationError, model: type[BaseModel]) -> str:
    """``exc``'s errors as one line: ``field: what is wrong`` each, an unknown field with
    the closest one ``model`` has (a nested settings object's for a nested name)."""
    lines = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        field = ".".join(loc) or "config"
        if err["type"] == "extra_forbidden" and loc:
            close = difflib.get_close_matches(loc[-1], _field_names(model, loc[:-1]), n=1)
            hint = f"did you mean {'.'.join((*loc[:-1], close[0]))}?" if close else "no such"
            lines.append(f"{field}: unknown setting; {hint}")
        else:
            lines.append(f"{field}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(lines)


def _field_names(model: type[BaseModel], path: tuple[str, ...]) -> list[str]:
    for part in path:
        field = model.model_fields.get(part)
        kind = field.annotation if field is not None else None
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            return []
        model = kind
    return list(model.model_fields)


class KafkaSecurity(OneLineSettings):
    """Authentication and encryption of the connections to Kafka (see the module doc)."""

    model_config = SettingsConfigDict(env_prefix="EOSFLOW_", frozen=True, extra="forbid")
    what: ClassVar[str] = "eosflow security settings"

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    ssl_cafile: FilePath | None = Field(
        default=None, description="PEM file of the CA(s) to trust; default: the system's"
    )
    ssl_certfile: FilePath | None = Field(
        default=None, description="PEM client certificate, for mutual TLS"
    )
    ssl_keyfile: FilePath | None = Field(
        default=None, description="PEM private key of ssl_certfile"
    )
    ssl_key_password: SecretStr | None = Field(
        default=None, description="password of ssl_keyfile, if it is encrypted"
    )
    ssl_check_hostname: bool = Field(
        default=True,
        description="check the broker's host name against its certificate (off: warned)",
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = (
        Field(default=None, description="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
    )
    sasl_username: str | None = Field(default=None, description="SASL PLAIN/SCRAM user")
    sasl_password: SecretStr | None = Field(default=None, description="SASL PLAIN/SCRAM password")
    sasl_oauth_token_provider: ImportString[TokenProvider] | None = Field(
        default=None,
        description="OAUTHBEARER: module:function returning a token (sync or async)",
    )

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def principal(self) -> str:
        """Who connects, for messages: the SASL user, the client certificate, or nobody."""
        if self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            return f"user {self.sasl_username!r} ({self.sasl_mechanism})"
        if self.sasl_mechanism == "OAUTHBEARER":
            return "an OAUTHBEARER token"
        if self.ssl_certfile is not None:
            return f"client certificate {Path(self.ssl_certfile).name}"
        return "no credentials"

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecurity:
        sasl = self.security_protocol in SASL_PROTOCOLS
        if sasl and self.sasl_mechanism is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_mechanism")
        if not sasl and self.sasl_mechanism is not None:
            raise ValueError(
                f"sasl_mechanism {self.sasl_mechanism} needs security_protocol "
                "SASL_SSL or SASL_PLAINTEXT"
            )
        files = {
            "ssl_cafile": self.ssl_cafile,
            "ssl_certfile": self.ssl_certfile,
            "ssl_keyfile": self.ssl_keyfile,
            "ssl_key_password": self.ssl_key_password,
        }
        given = [name for name, value in files.items() if value is not None]
        if given and not self.tls:
            raise ValueError(
                f"{', '.join(given)} set, but security_protocol {self.security_protocol} "
                "does not use TLS (SSL or SASL_SSL)"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("ssl_keyfile needs ssl_certfile")
        if self.sasl_mechanism == "OAUTHBEARER":
            if self.sasl_oauth_token_provider is None:
                raise ValueError("sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider")
        elif self.sasl_mechanism is not None:
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError(
                    f"sasl_mechanism {self.sasl_mechanism} needs sasl_username and sasl_password"
                )
        if self.sasl_oauth_token_provider is not None and self.sasl_mechanism != "OAUTHBEARER":
            raise ValueError("sasl_oauth_token_provider needs sasl_mechanism OAUTHBEARER")
        return self


def secret(value: SecretStr | None) -> str | None:
    """A secret's value, for the one place that hands it to the client library."""
    return None if value is None else value.get_secret_value()
