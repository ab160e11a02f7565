"""``KafkaSecurity`` as aiokafka's connection settings, and why a connection was refused.

``connection_settings`` is what every client eosflow builds passes to aiokafka, so the
consumer, the producer (whose connections carry the adapter's own requests) and the
checker authenticate alike.

aiokafka logs a refused TLS handshake or SASL authentication at bootstrap and moves on
to the next server; once all refused, it raises only "Unable to bootstrap". So when a
client cannot bootstrap with security on, ``diagnose`` opens one connection itself with
the same settings and says what the broker (or the TLS layer) answered: a wrong
password, an expired or untrusted certificate, a host name that does not match. Each is
an ``AuthenticationError``: retrying cannot fix credentials, and a loop would only hide
them. Secrets never enter a message.

Mid-run, aiokafka only logs a refused login and retries it: ``LoginWatch`` notices the
log line and has the session diagnose. For OAUTHBEARER, aiokafka takes a refused token
for a login, so ``diagnose`` presents the token itself (``_refused_token``).
"""

from __future__ import annotations

import inspect
import logging
import ssl
from typing import Any

from aiokafka.abc import AbstractTokenProvider
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError, UnsupportedSaslMechanismError
from aiokafka.protocol.admin import SaslAuthenticateRequest, SaslHandShakeRequest

from .._errors import AuthenticationError, ConfigError
from .._protocol import codes
from .._security import KafkaSecurity, TokenProvider, secret
from .._timeouts import within
from ._errors import is_refused_login

log = logging.getLogger("eosflow.adapter")

DIAGNOSE_TIMEOUT_S = 10.0
"""How long the diagnosing connection may take per bootstrap server: a broker that does
not answer within it leaves "no bootstrap server answered" as the error."""


class _Tokens(AbstractTokenProvider):  # type: ignore[misc]
    """aiokafka's OAUTHBEARER hook around the user's token function."""

    def __init__(self, provider: TokenProvider) -> None:
        self._provider = provider

    async def token(self) -> str:
        got = self._provider()
        if inspect.isawaitable(got):
            got = await got
        return str(got)


def connection_settings(security: KafkaSecurity) -> dict[str, Any]:
    """aiokafka's keyword arguments for ``security`` (for every client's constructor)."""
    kw: dict[str, Any] = {"security_protocol": security.security_protocol}
    if security.tls:
        kw["ssl_context"] = tls_context(security)
    if security.sasl_mechanism is not None:
        kw["sasl_mechanism"] = security.sasl_mechanism
        if security.sasl_mechanism == "OAUTHBEARER":
            assert security.sasl_oauth_token_provider is not None  # checked by the config
            kw["sasl_oauth_token_provider"] = _Tokens(security.sasl_oauth_token_provider)
        else:
            kw["sasl_plain_username"] = security.sasl_username
            kw["sasl_plain_password"] = secret(security.sasl_password)
    return kw


def tls_context(security: KafkaSecurity) -> ssl.SSLContext:
    """The TLS context of ``security``; a file that cannot be loaded is a ConfigError."""
    try:
        ctx = ssl.create_default_context(
            cafile=str(security.ssl_cafile) if security.ssl_cafile else None
        )
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"ssl_cafile {security.ssl_cafile}: no CA loaded ({exc})") from None
    if not security.ssl_check_hostname:
        log.warning(
            "ssl_check_hostname is off: any holder of a certificate the CA signed can "
            "pose as the broker"
        )
        ctx.check_hostname = False
    if security.ssl_certfile is not None:
        try:
            ctx.load_cert_chain(
                str(security.ssl_certfile),
                str(security.ssl_keyfile) if security.ssl_keyfile else None,
                secret(security.ssl_key_password),
            )
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"ssl_certfile {security.ssl_certfile}: the client certificate and key "
                f"cannot be loaded ({exc.__class__.__name__}: {_reason(exc)})"
            ) from None
    return ctx


async def diagnose(bootstrap_servers: str, security: KafkaSecurity, timeout_s: float) -> None:
    """Raise ``AuthenticationError`` when a bootstrap server refuses ``security``'s
    credentials or its TLS handshake fails; return when one accepts them, or none
    answers at all (then "no bootstrap server answered" stands)."""
    for server in bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            conn = await within(
                create_conn(
                    host.strip("[]"),
                    int(port),
                    request_timeout_ms=int(timeout_s * 1000),
                    **connection_settings(security),
                ),
                timeout_s,
            )
        except (ssl.SSLError, KafkaError) as exc:
            tls = exc if isinstance(exc, ssl.SSLError) else exc.__cause__
            if isinstance(tls, ssl.SSLError):
                raise AuthenticationError(_tls_refusal(server, tls)) from None
            if isinstance(exc, UnsupportedSaslMechanismError):
                raise AuthenticationError(
                    f"SASL with {server}: the broker does not enable {security.sasl_mechanism}"
                ) from None
            if getattr(exc, "errno", None) != codes.SASL_AUTHENTICATION_FAILED:
                continue
            raise AuthenticationError(
                f"SASL with {server}: authentication failed for {security.principal}"
                f"{': ' + str(exc) if str(exc) else ''}"
            ) from None
        except (TimeoutError, OSError):
            continue
        conn.close()
        if security.sasl_mechanism == "OAUTHBEARER":
            why = await _refused_token(host.strip("[]"), int(port), security, timeout_s)
            if why is not None:
                raise AuthenticationError(
                    f"SASL with {server}: authentication failed for {security.principal}: {why}"
                )
        return


async def _refused_token(
    host: str, port: int, security: KafkaSecurity, timeout_s: float
) -> str | None:
    """Why the broker refuses our OAUTHBEARER token, or None if it accepts it.

    aiokafka takes the broker's answer to a refused token -- an error challenge with no
    error code (RFC 7628: ``{"status": "invalid_token"}``) -- for a finished login, and
    then finds the connection closed under its first request. So the token is presented
    here by hand, and an error challenge is answered as the RFC says (``\x01``), which
    makes the broker give its reason with SASL_AUTHENTICATION_FAILED."""
    kw: dict[str, Any] = {"security_protocol": "SSL" if security.tls else "PLAINTEXT"}
    if security.tls:
        kw["ssl_context"] = tls_context(security)
    try:
        conn = await within(
            create_conn(host, port, request_timeout_ms=int(timeout_s * 1000), **kw), timeout_s
        )
    except (KafkaError, TimeoutError, OSError):
        return None  # whatever stops this connection stops the app's too, and says so
    try:
        assert security.sasl_oauth_token_provider is not None  # checked by the config
        token = await _Tokens(security.sasl_oauth_token_provider).token()
        handshake = await conn.send(SaslHandShakeRequest("OAUTHBEARER"))
        if handshake.error_code:
            return None  # a mechanism the broker does not enable: aiokafka names it
        first = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
        answer = await conn.send(SaslAuthenticateRequest(first))
        if answer.error_code:
            return f"[Error {answer.error_code}] {answer.error_message}"
        if not answer.sasl_auth_bytes:
            return None  # accepted
        status = answer.sasl_auth_bytes.decode(errors="replace")
        final = await conn.send(SaslAuthenticateRequest(b"\x01"))
        reason = final.error_message or ""
        said = status if reason in ("", status) else f"{reason} ({status})"
        # Kafka's validator keeps the cause to its own log
        return f"{said}; the broker's log says why (expiry, signing key, issuer, audience)"
    except (KafkaError, TimeoutError, OSError):
        return None
    finally:
        conn.close()


class LoginWatch(logging.Filter):
    """Notices a login or certificate refused on a connection aiokafka opens mid-run.

    aiokafka logs such a refusal ("Unable connect to node ...") and tries the connection
    again, for ever: a password rotated or a certificate expired while the app runs
    would leave it fetching nothing and never failing. While attached to aiokafka's
    client logger (``attach`` .. ``detach``, the session's lifetime) this filter only
    notes that a refusal was logged; ``check`` then opens a connection of its own
    (``diagnose``), so what stops the app is a refusal seen first-hand, not a log line.
    Every client in the process logs through the same logger: another app's refusal
    costs this one a diagnosis, nothing more."""

    def __init__(self) -> None:
        super().__init__()
        self._seen = False
        self._logger = logging.getLogger("aiokafka")  # aiokafka's client.py logs here

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if any(isinstance(a, Exception) and is_refused_login(a) for a in args):
            self._seen = True
        return True

    def attach(self) -> None:
        # first in line: a summarising filter before it would hide repeats from it
        if self not in self._logger.filters:
            self._logger.filters.insert(0, self)

    def detach(self) -> None:
        self._logger.removeFilter(self)

    async def check(self, bootstrap_servers: str, security: KafkaSecurity) -> None:
        """Raise ``AuthenticationError`` if a refusal was logged since the last check and
        a connection of our own is refused too."""
        if self._seen:
            self._seen = False
            await diagnose(bootstrap_servers, security, DIAGNOSE_TIMEOUT_S)


def _tls_refusal(server: str, exc: ssl.SSLError) -> str:
    """What a failed TLS handshake means, in one line."""
    if isinstance(exc, ssl.SSLCertVerificationError):  # we refused the broker
        why = exc.verify_message or _reason(exc)
        return f"TLS to {server}: the broker's certificate was refused: {why} (ssl_cafile)"
    hint = ""
    if "ALERT" in _reason(exc).upper():  # the broker refused us, after the handshake in TLS 1.3
        hint = " (a client certificate the broker does not accept, or none: ssl_certfile)"
    return f"TLS to {server}: the broker refused the connection: {_reason(exc)}{hint}"


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc or type(exc).__name__)
