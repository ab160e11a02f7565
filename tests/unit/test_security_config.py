"""``KafkaSecurity``: settings from code, environment and flags; inconsistent ones refused
with the setting named; secrets never shown; what the adapter hands to aiokafka."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import pytest

import eosflow
from eosflow import ConfigError, KafkaSecurity, load_config
from eosflow._aiokafka._security import connection_settings, tls_context
from eosflow._cli import _parser, config_values, main

BASE = dict(bootstrap_servers="h:1", group_id="g", input_topics=("a",), transactional_id="t")
SCRAM = dict(
    security_protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="app",
    sasl_password="s3cr3t-pw",
)


def test_the_default_is_plaintext_with_no_credentials() -> None:
    c = eosflow.EosConfig(**BASE)  # type: ignore[arg-type]
    assert c.security.security_protocol == "PLAINTEXT"
    assert connection_settings(c.security) == {"security_protocol": "PLAINTEXT"}


def test_secrets_never_show_in_repr_str_or_errors(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    key.write_text("x")
    c = load_config(**BASE, security=KafkaSecurity(**SCRAM))  # type: ignore[arg-type]
    for text in (repr(c), str(c), repr(c.security), str(c.model_dump())):
        assert "s3cr3t-pw" not in text
    assert c.security.sasl_password is not None
    assert c.security.sasl_password.get_secret_value() == "s3cr3t-pw"
    with pytest.raises(ConfigError) as info:  # an invalid config that holds a secret
        load_config(**BASE, security={**SCRAM, "ssl_keyfile": str(key)})
    assert "s3cr3t-pw" not in str(info.value)
    assert "ssl_keyfile needs ssl_certfile" in str(info.value)


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"security_protocol": "SASL_SSL"}, "security_protocol SASL_SSL needs sasl_mechanism"),
        ({"sasl_mechanism": "PLAIN"}, "sasl_mechanism PLAIN needs security_protocol"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256"},
            "needs sasl_username and sasl_password",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
            "needs sasl_oauth_token_provider",
        ),
        ({"ssl_check_hostname": "maybe"}, "ssl_check_hostname"),
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}, "ssl_cafile"),
        ({"sasl_oauth_token_provider": "no_such_module:token"}, "sasl_oauth_token_provider"),
    ],
)
def test_inconsistent_settings_are_one_line_naming_the_setting(
    settings: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(**BASE, security=settings)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_tls_files_without_tls_are_refused_not_ignored(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(ConfigError, match="ssl_cafile set, but security_protocol SASL_PLAINTEXT"):
        load_config(
            **BASE, security={**SCRAM, "security_protocol": "SASL_PLAINTEXT", "ssl_cafile": str(ca)}
        )


def test_environment_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOSFLOW_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("EOSFLOW_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("EOSFLOW_SASL_PASSWORD", "from-env")
    args = _parser().parse_args(
        ["run", "m:P", "--sasl-username", "cli-user", "--no-ssl-check-hostname"]
    )
    c = load_config(**BASE, **config_values(args))
    s = c.security
    assert (s.security_protocol, s.sasl_mechanism, s.sasl_username) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "cli-user",
    )
    assert s.sasl_password is not None and s.sasl_password.get_secret_value() == "from-env"
    assert s.ssl_check_hostname is False


def test_a_misspelt_security_variable_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOSFLOW_SASL_PASWORD", "x")
    with pytest.raises(ConfigError, match="did you mean EOSFLOW_SASL_PASSWORD"):
        load_config(**BASE)


def test_eosflow_check_takes_the_security_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "check",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--input-topic",
            "i",
            "--output-topic",
            "o",
            "--security-protocol",
            "SASL_SSL",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "needs sasl_mechanism" in err and err.count("\n") == 1


def test_scram_over_tls_reaches_aiokafka_with_hostname_checks_on() -> None:
    kw = connection_settings(KafkaSecurity(**SCRAM))  # type: ignore[arg-type]
    assert kw["security_protocol"] == "SASL_SSL" and kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("app", "s3cr3t-pw")
    ctx = kw["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED


def test_hostname_checks_off_is_warned(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="eosflow.adapter"):
        ctx = tls_context(KafkaSecurity(security_protocol="SSL", ssl_check_hostname=False))
    assert not ctx.check_hostname
    assert "ssl_check_hostname is off" in caplog.text


def test_an_unloadable_client_certificate_is_a_config_error(tmp_path: Path) -> None:
    cert = tmp_path / "client.pem"
    cert.write_text("not a certificate")
    with pytest.raises(ConfigError, match="client certificate and key cannot be loaded"):
        tls_context(KafkaSecurity(security_protocol="SSL", ssl_certfile=cert))


def sync_token() -> str:
    return "tok-sync"


async def async_token() -> str:
    return "tok-async"


@pytest.mark.parametrize("provider", ["sync_token", "async_token"])
def test_oauthbearer_token_provider_from_an_import_string(provider: str) -> None:
    s = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=f"{__name__}:{provider}",  # type: ignore[arg-type]
    )
    hook = connection_settings(s)["sasl_oauth_token_provider"]
    assert asyncio.run(hook.token()) == f"tok-{provider.split('_')[0]}"


def test_only_refused_certificates_are_fatal_among_tls_errors() -> None:
    """A TLS connection cut when a broker dies must stay a retried network failure."""
    from aiokafka.errors import KafkaConnectionError

    from eosflow._aiokafka import map_error
    from eosflow._errors import TransientError

    cut = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert isinstance(map_error(cut, "Produce"), TransientError)
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    assert isinstance(map_error(verify, "joining the group"), eosflow.AuthenticationError)
    alert = ssl.SSLError(1, "[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate")
    alert.reason = "SSLV3_ALERT_BAD_CERTIFICATE"
    wrapped = KafkaConnectionError("Connection at 127.0.0.1:1 closed")
    wrapped.__cause__ = alert
    assert isinstance(map_error(wrapped, "InitProducerId"), eosflow.AuthenticationError)
    closed = KafkaConnectionError("Connection at 127.0.0.1:1 closed")
    closed.__cause__ = cut
    assert isinstance(map_error(closed, "Produce"), TransientError)
