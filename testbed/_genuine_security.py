"""The secured genuine broker: TLS, SASL SCRAM-SHA-512, mutual TLS and ACLs.

``SecuredKafka`` is a ``GenuineKafka`` (KRaft, Kafka 4) whose ``prepare`` makes the
throwaway PKI in the cluster's folder and answers the ``BrokerAddons`` below: every
broker gets, beside the PLAINTEXT listener the brokers and the test's own admin use:

- ``SASL_SSL``: SCRAM-SHA-512; user ``SCRAM_USER`` is created when the storage is
  formatted (``--add-scram``), with a password drawn per cluster (``scram_password``);
  and OAUTHBEARER with Kafka's OIDC validator (``OAuthBearerValidatorCallbackHandler``):
  RS256 tokens checked against the test identity provider's key set (``Pki.jwks``, a
  file URL the broker's JVM is allowed to read), its issuer and audience; a token from
  ``Pki.tokens.token(SCRAM_USER)`` logs in as the same principal;
- ``MTLS``: TLS with ``ssl.client.auth=required``; the principal is the certificate's CN
  (``User:app-client``, by ``ssl.principal.mapping.rules``);
- ``EXPIRED``: TLS with a broker certificate that expired yesterday.

Certificates come from ``_pki.make_pki``; the broker trusts the test CA. Authorization is
``StandardAuthorizer`` with no ACL meaning no access; ``User:ANONYMOUS`` (the PLAINTEXT
and controller listeners) is a super user, so the brokers and the test's set-up are
unrestricted while eosflow, connecting over SASL_SSL or MTLS, gets only the ACLs a test
grants (``create_acls``; ``app_acls`` is what docs/howto/security.md lists).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eosflow._protocol import wire
from eosflow._timeouts import within
from eosflow.testing._genuine import DEFAULT_VERSION, BrokerAddons, GenuineKafka

from ._identities import CLIENT_CN, TOKEN_AUDIENCE, TOKEN_ISSUER

field = wire.field

if TYPE_CHECKING:  # _pki needs the cryptography package: imported when a cluster starts
    from ._pki import Pki

SCRAM_USER = "app"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
OIDC_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"  # a JVM property
LISTENERS = {"SASL_SSL": "SASL_SSL", "MTLS": "SSL", "EXPIRED": "SSL"}

# Kafka's ACL enums (org.apache.kafka.common.acl / resource)
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE = 3, 4, 5, 8, 10, 12
ALLOW = 3

CREATE_ACLS = wire.MessageSpec(
    api_key=30,
    name="CreateAcls",
    versions=(2, 3),  # what Kafka 4 keeps; both flexible
    flexible_from=2,
    request=(
        field(
            "creations",
            (
                field("resource_type", "int8"),
                field("resource_name", "string"),
                field("resource_pattern_type", "int8"),
                field("principal", "string"),
                field("host", "string"),
                field("operation", "int8"),
                field("permission_type", "int8"),
            ),
        ),
    ),
    response=(
        field("throttle_time_ms", "int32"),
        field("results", (field("error_code", "int16"), field("error_message", "string"))),
    ),
)


# AlterUserScramCredentials (KIP-554): SCRAM users without ZooKeeper; 1 is SCRAM-SHA-256
SCRAM_SHA_512, SCRAM_ITERATIONS = 2, 4096
ALTER_USER_SCRAM_CREDENTIALS = wire.MessageSpec(
    api_key=51,
    name="AlterUserScramCredentials",
    versions=(0, 0),
    flexible_from=0,
    request=(
        field("deletions", (field("name", "string"), field("mechanism", "int8"))),
        field(
            "upsertions",
            (
                field("name", "string"),
                field("mechanism", "int8"),
                field("iterations", "int32"),
                field("salt", "bytes"),
                field("salted_password", "bytes"),
            ),
        ),
    ),
    response=(
        field("throttle_time_ms", "int32"),
        field(
            "results",
            (
                field("user_name", "string"),
                field("error_code", "int16"),
                field("error_message", "string"),
            ),
        ),
    ),
)


@dataclass(frozen=True)
class Acl:
    """Allow ``principal`` ``operation`` on one resource named literally (or, with
    ``PREFIXED``, on every resource whose name starts with ``resource_name``)."""

    principal: str
    resource_type: int
    resource_name: str
    operation: int
    pattern: int = LITERAL


def app_acls(
    principal: str,
    *,
    transactional_id: str,
    group_id: str,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
) -> list[Acl]:
    """What an eosflow app needs: WRITE and DESCRIBE on its transactional id, READ on its
    group and input topics, WRITE on its output and dead-letter topics (docs/howto/security.md)."""
    acls = [
        Acl(principal, TRANSACTIONAL_ID, transactional_id, WRITE),
        Acl(principal, TRANSACTIONAL_ID, transactional_id, DESCRIBE),
        Acl(principal, GROUP, group_id, READ),
    ]
    acls += [Acl(principal, TOPIC, t, READ) for t in inputs]
    acls += [Acl(principal, TOPIC, t, WRITE) for t in outputs]
    return acls


def state_acls(principal: str, group_id: str) -> list[Acl]:
    """What an app with state stores needs besides ``app_acls`` (docs/howto/security.md): CREATE,
    DESCRIBE_CONFIGS, WRITE and READ on the topics prefixed ``<group>--``, its changelogs."""
    ops = (CREATE, DESCRIBE_CONFIGS, WRITE, READ)
    return [Acl(principal, TOPIC, f"{group_id}--", op, PREFIXED) for op in ops]


async def create_acls(plaintext_server: str, acls: list[Acl], timeout_s: float = 10.0) -> None:
    """Create ``acls`` through the super user's PLAINTEXT listener (CreateAcls v2, raw on
    a socket); any refusal raises."""
    body = {
        "creations": [
            {
                "resource_type": a.resource_type,
                "resource_name": a.resource_name,
                "resource_pattern_type": a.pattern,
                "principal": a.principal,
                "host": "*",
                "operation": a.operation,
                "permission_type": ALLOW,
            }
            for a in acls
        ]
    }
    _throttle, results, _tags = await _admin_request(
        plaintext_server, CREATE_ACLS, 2, body, timeout_s
    )
    failed = [(a, r) for a, r in zip(acls, results, strict=True) if r[0] != 0]
    if failed:
        raise RuntimeError(f"CreateAcls refused: {failed}")


async def set_scram_password(
    plaintext_server: str, user: str, password: str, timeout_s: float = 10.0
) -> None:
    """Create SCRAM-SHA-512 user ``user`` or change its password (AlterUserScramCredentials
    v0 through the super user's PLAINTEXT listener, as ``kafka-configs --alter
    --add-config SCRAM-SHA-512=[password=...]`` does). Connections already logged in
    keep their session; every login after it needs the new password."""
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, SCRAM_ITERATIONS)
    body = {
        "deletions": [],
        "upsertions": [
            {
                "name": user,
                "mechanism": SCRAM_SHA_512,
                "iterations": SCRAM_ITERATIONS,
                "salt": salt,
                "salted_password": salted,
            }
        ],
    }
    _throttle, results, _tags = await _admin_request(
        plaintext_server, ALTER_USER_SCRAM_CREDENTIALS, 0, body, timeout_s
    )
    failed = [r for r in results if r[1] != 0]
    if failed:
        raise RuntimeError(f"AlterUserScramCredentials refused: {failed}")


async def _admin_request(
    plaintext_server: str,
    spec: wire.MessageSpec,
    version: int,
    body: dict[str, Any],
    timeout_s: float,
) -> Any:
    """Send one flexible-version request of ``spec`` raw on a socket to the first of
    ``plaintext_server`` (the super user's listener) and return its decoded answer."""
    host, _, port = plaintext_server.split(",")[0].rpartition(":")
    req, resp = wire.spec_classes(spec, version)
    client = b"eosflow-test-admin"
    head = struct.pack(">hhih", spec.api_key, version, 1, len(client)) + client + b"\x00"
    payload = head + req.SCHEMA.encode(wire.to_values(req.SCHEMA, body))
    reader, writer = await within(asyncio.open_connection(host, int(port)), timeout_s)
    try:
        writer.write(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", await within(reader.readexactly(4), timeout_s))
        buf = BytesIO(await within(reader.readexactly(size), timeout_s))
    finally:
        writer.close()
    buf.read(5)  # correlation id, no tagged fields (response header v1)
    return resp.SCHEMA.decode(buf)


def secured_properties(pki: Pki) -> dict[str, str]:
    """The broker properties of the secured listeners (``LISTENERS``, added by
    ``GenuineKafka`` from ``BrokerAddons.listeners``)."""
    props = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        # OAUTHBEARER with Kafka's OIDC validator: signed tokens, checked against the key
        # set, issuer and audience of the test identity provider (_pki.TokenIssuer)
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        ),
        "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": pki.jwks.as_uri(),
        "sasl.oauthbearer.expected.issuer": TOKEN_ISSUER,
        "sasl.oauthbearer.expected.audience": TOKEN_AUDIENCE,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.expired.ssl.keystore.type": "PEM",
        "listener.name.expired.ssl.keystore.location": str(pki.expired_broker),
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }
    return props


class SecuredKafka(GenuineKafka):
    """``GenuineKafka`` with the secured listeners (``LISTENERS``), the SCRAM user
    ``SCRAM_USER`` (its password drawn per cluster: ``scram_password``) and the PKI
    (``pki``, made in the cluster's folder when it starts)."""

    def __init__(
        self,
        version: str = DEFAULT_VERSION,
        brokers: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        features: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(version, brokers, config=config, features=features, prepare=self._secure)
        self.pki: Pki | None = None
        self.scram_password = secrets.token_urlsafe(12)

    def _secure(self, folder: Path) -> BrokerAddons:
        from ._pki import make_pki  # needs cryptography (the dev extra)

        self.pki = pki = make_pki(folder / "pki")
        user = f"SCRAM-SHA-512=[name={SCRAM_USER},password={self.scram_password}]"
        return BrokerAddons(
            listeners=LISTENERS,
            properties=secured_properties(pki),
            # Kafka 4 reads an OAUTHBEARER key set only from URLs this property allows
            jvm_properties={OIDC_ALLOWED_URLS: pki.jwks.as_uri()},
            format_args=("--add-scram", user),  # the user exists from the first start
        )

    def secured_servers(self, listener: str = "SASL_SSL") -> str:
        """The bootstrap servers of a secured listener: SASL_SSL, MTLS or EXPIRED."""
        return self.listener_servers(listener)


MTLS_PRINCIPAL = f"User:{CLIENT_CN}"
SCRAM_PRINCIPAL = f"User:{SCRAM_USER}"
