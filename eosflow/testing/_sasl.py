"""TLS and SASL on the test cluster's listener, enough to test a client's security
settings without a real broker (``ClusterSettings(security=ClusterSecurity(...))``).

- **TLS** when ``certfile`` (and ``keyfile``) are given: the listener speaks TLS with that
  certificate; clients must trust its CA (``KafkaSecurity.ssl_cafile``).
- **SASL** when ``users`` is given (user -> password): PLAIN, SCRAM-SHA-256 and
  SCRAM-SHA-512 (RFC 5802 with Kafka's 4096 iterations), as Kafka's SASL listeners do.

Behaviour, as genuine Kafka (SaslHandshake v0-1, SaslAuthenticate v0-1):

- before authenticating, a connection may send ApiVersions, SaslHandshake and
  SaslAuthenticate only; any other request closes it;
- SaslHandshake with a mechanism not enabled answers UNSUPPORTED_SASL_MECHANISM with
  the enabled list; a second handshake answers ILLEGAL_SASL_STATE;
- a wrong user or password answers SASL_AUTHENTICATION_FAILED with Kafka's message
  ("Authentication failed during authentication due to invalid credentials with SASL
  mechanism ...") and then closes the connection;
- on a listener without SASL both requests answer ILLEGAL_SASL_STATE (the handlers).

Not modelled: SaslHandshake v0's unframed tokens (every client since Kafka 1.0 uses
SaslAuthenticate), re-authentication (KIP-368), OAUTHBEARER, GSSAPI.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._protocol import codes

SCRAM_ITERATIONS = 4096
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclass(frozen=True)
class ClusterSecurity:
    """The test cluster's listener security: TLS with ``certfile``/``keyfile``, SASL with
    ``users`` (None: no SASL) over ``mechanisms``."""

    users: Mapping[str, str] | None = None
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    certfile: Path | None = None
    keyfile: Path | None = None
    _salts: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def server_context(self) -> ssl.SSLContext | None:
        """The listener's TLS context, None for no TLS."""
        if self.certfile is None:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(self.certfile), str(self.keyfile) if self.keyfile else None)
        return ctx

    def salt(self, user: str) -> bytes:
        """A stable salt per user (as a broker's stored SCRAM credential has)."""
        return self._salts.setdefault(user, os.urandom(16))


def failed(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with "
        f"SASL mechanism {mechanism}"
    )


class SaslConnection:
    """One connection's SASL state: handshake, then authenticate, then anything."""

    def __init__(self, security: ClusterSecurity) -> None:
        assert security.users is not None
        self.security, self.users = security, security.users
        self.mechanism: str | None = None
        self.done = False
        self.close_after_answer = False  # a refused login: answered, then closed
        self._scram: tuple[str, str, bytes] | None = None  # user, nonce, client-first bare
        self._server_first = b""

    def allowed(self, api_key: int) -> bool:
        """Whether a request may come now: before login only the SASL ones and ApiVersions."""
        return self.done or api_key in (17, 18, 36)

    def handshake(self, body: dict[str, Any]) -> dict[str, Any]:
        enabled = list(self.security.mechanisms)
        if self.mechanism is not None or self.done:
            return {"error_code": codes.ILLEGAL_SASL_STATE, "enabled_mechanisms": enabled}
        if body["mechanism"] not in enabled:
            return {"error_code": codes.UNSUPPORTED_SASL_MECHANISM, "enabled_mechanisms": enabled}
        self.mechanism = body["mechanism"]
        return {"error_code": 0, "enabled_mechanisms": enabled}

    def authenticate(self, body: dict[str, Any]) -> dict[str, Any]:
        token: bytes = body["sasl_auth_bytes"] or b""
        if self.mechanism is None or self.done:
            return self._answer(codes.ILLEGAL_SASL_STATE, "SaslAuthenticate out of turn")
        if self.mechanism == "PLAIN":
            parts = token.split(b"\0")
            ok = len(parts) == 3 and self._check(parts[1].decode(), parts[2].decode())
            return self._finish(ok, b"")
        if self._scram is None:
            return self._scram_first(token)
        return self._scram_final(token)

    def _check(self, user: str, password: str) -> bool:
        want = self.users.get(user)
        return want is not None and hmac.compare_digest(want.encode(), password.encode())

    def _scram_first(self, token: bytes) -> dict[str, Any]:
        text = token.decode()
        bare = text.split(",", 2)[2] if text.startswith(("n,", "y,")) else ""
        attrs = dict(a.split("=", 1) for a in bare.split(",") if "=" in a)
        user, cnonce = attrs.get("n", ""), attrs.get("r", "")
        if not user or not cnonce:
            return self._finish(False, b"")
        nonce = cnonce + base64.b64encode(os.urandom(18)).decode()
        salt = self.security.salt(user)
        self._scram = (user, nonce, bare.encode())
        first = f"r={nonce},s={base64.b64encode(salt).decode()},i={SCRAM_ITERATIONS}"
        self._server_first = first.encode()
        return self._answer(0, None, first.encode())

    def _scram_final(self, token: bytes) -> dict[str, Any]:
        assert self._scram is not None and self.mechanism is not None
        user, nonce, bare = self._scram
        text = token.decode()
        without_proof, _, proof_b64 = text.rpartition(",p=")
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        password = self.users.get(user)
        if password is None or attrs.get("r") != nonce:
            return self._finish(False, b"")
        algo = _HASHES[self.mechanism]
        salted = hashlib.pbkdf2_hmac(
            algo, password.encode(), self.security.salt(user), SCRAM_ITERATIONS
        )
        client_key = hmac.new(salted, b"Client Key", algo).digest()
        stored = hashlib.new(algo, client_key).digest()
        auth_message = bare + b"," + self._server_first + b"," + without_proof.encode()
        signature = hmac.new(stored, auth_message, algo).digest()
        want = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        try:
            proof = base64.b64decode(proof_b64)
        except ValueError:
            proof = b""
        if not hmac.compare_digest(proof, want):
            return self._finish(False, b"")
        server_key = hmac.new(salted, b"Server Key", algo).digest()
        verifier = hmac.new(server_key, auth_message, algo).digest()
        return self._finish(True, b"v=" + base64.b64encode(verifier))

    def _finish(self, ok: bool, token: bytes) -> dict[str, Any]:
        if ok:
            self.done = True
            return self._answer(0, None, token)
        self.close_after_answer = True
        assert self.mechanism is not None
        return self._answer(codes.SASL_AUTHENTICATION_FAILED, failed(self.mechanism))

    @staticmethod
    def _answer(code: int, message: str | None, token: bytes = b"") -> dict[str, Any]:
        return {
            "error_code": code,
            "error_message": message,
            "sasl_auth_bytes": token,
            "session_lifetime_ms": 0,
        }
