"""A throwaway certificate authority for secured test brokers (``cryptography``).

``make_pki(folder)`` writes PEM files: a CA, a broker certificate for 127.0.0.1 and
localhost signed by it (key and chain in one file, Kafka's PEM keystore), the same
broker's certificate already expired, a client certificate for mutual TLS
(``CN=app-client``), and a second CA that signed none of them (a client trusting only
it must refuse the broker). TLS keys are EC P-256, unencrypted PKCS#8 (what Kafka's PEM
keystore takes without ``ssl.key.password``).

Beside them, an identity provider's signing key: ``tokens`` signs OAUTHBEARER tokens
(RS256 JWTs) whose public key the broker reads from ``jwks.json``; ``rogue_tokens``
signs alike with a key the broker never saw. For tests only: the keys sit in a temp
folder and live a day.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ._identities import CLIENT_CN, TOKEN_AUDIENCE, TOKEN_ISSUER


@dataclass(frozen=True)
class TokenIssuer:
    """Signs OAUTHBEARER tokens as an OIDC identity provider does: RS256 JWTs naming
    ``TOKEN_ISSUER`` and ``TOKEN_AUDIENCE``, the principal in ``sub``."""

    key: rsa.RSAPrivateKey
    kid: str

    def token(self, subject: str, lifetime_s: float = 3600.0) -> str:
        """A token for ``subject``, valid from now for ``lifetime_s`` (negative: expired)."""
        now = int(time.time())
        head = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        claims = {
            "iss": TOKEN_ISSUER,
            "aud": TOKEN_AUDIENCE,
            "sub": subject,
            "iat": now - 60 if lifetime_s < 0 else now,
            "exp": now + int(lifetime_s),
        }
        signing_input = ".".join(_b64(json.dumps(part).encode()) for part in (head, claims))
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def jwks(self) -> bytes:
        """The public key as a JSON Web Key Set (what the broker's validator reads)."""
        numbers = self.key.public_key().public_numbers()
        key = {
            "kty": "RSA",
            "use": "sig",
            "alg": "RS256",
            "kid": self.kid,
            "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
            "e": _b64(numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")),
        }
        return json.dumps({"keys": [key]}).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate clients and brokers trust
    broker: Path  # broker key + certificate chain (Kafka PEM keystore)
    expired_broker: Path  # the same, expired yesterday
    client_cert: Path  # CN=app-client, for mutual TLS
    client_key: Path
    other_ca: Path  # a CA that signed nothing here
    jwks: Path  # the identity provider's public key set (``tokens``)
    tokens: TokenIssuer  # signs tokens the broker accepts
    rogue_tokens: TokenIssuer  # signs tokens with a key the broker never saw


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key, ca_cert = _ca("eosflow test CA", now)
    _, other_cert = _ca("eosflow untrusted CA", now)
    broker_key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    )
    server = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    fresh = _signed("kafka-broker", broker_key, ca_key, ca_cert, now, now + _DAY, san, server)
    expired = _signed(
        "kafka-broker", broker_key, ca_key, ca_cert, now - 2 * _DAY, now - _DAY, san, server
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    client_cert = _signed(CLIENT_CN, client_key, ca_key, ca_cert, now, now + _DAY, None, client)
    pki = Pki(
        ca=folder / "ca.pem",
        broker=folder / "broker.pem",
        expired_broker=folder / "broker-expired.pem",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
        other_ca=folder / "other-ca.pem",
        jwks=folder / "jwks.json",
        tokens=TokenIssuer(rsa.generate_private_key(65537, 2048), "eosflow-test-idp-1"),
        rogue_tokens=TokenIssuer(rsa.generate_private_key(65537, 2048), "eosflow-test-idp-1"),
    )
    pki.jwks.write_bytes(pki.tokens.jwks())
    pki.ca.write_bytes(_pem(ca_cert))
    pki.other_ca.write_bytes(_pem(other_cert))
    pki.broker.write_bytes(_key(broker_key) + _pem(fresh) + _pem(ca_cert))
    pki.expired_broker.write_bytes(_key(broker_key) + _pem(expired) + _pem(ca_cert))
    pki.client_cert.write_bytes(_pem(client_cert))
    pki.client_key.write_bytes(_key(client_key))
    return pki


_DAY = dt.timedelta(days=1)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str, now: dt.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _signed(
    cn: str,
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    start: dt.datetime,
    end: dt.datetime,
    san: x509.SubjectAlternativeName | None,
    usage: x509.ExtendedKeyUsage,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - dt.timedelta(minutes=5))
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
