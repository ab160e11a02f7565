"""The schema registry over TLS: a genuine registry (the test kit's Apicurio, HTTPS only,
its certificate signed by the test CA of ``testbed._pki``) reached by eosflow's client
trusting that CA (``ssl_cafile``), and refused at once -- not retried for
``retry_timeout_s`` -- by a client trusting another. The comment above each test names
the mutation it caught."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import eosflow
from eosflow._schemas import Registry
from eosflow.testing import RegistryTls, SchemaRegistry
from testbed._pki import Pki, make_pki

pytestmark = pytest.mark.genuine

SCHEMA = '{"type": "record", "name": "T", "fields": [{"name": "id", "type": "long"}]}'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_registry(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("registry-tls")
    blocks = pki.broker.read_text().split("-----END ")
    key = blocks[0] + "-----END " + blocks[1].split("\n", 1)[0] + "\n"  # the key comes first
    cert, key_file = folder / "cert.pem", folder / "key.pem"
    key_file.write_text(key)
    cert.write_text(pki.broker.read_text()[len(key) :].lstrip())
    registry = SchemaRegistry(tls=RegistryTls(certificate=cert, key=key_file, ca=pki.ca))
    registry.start_sync()
    try:
        assert registry.url.startswith("https://127.0.0.1:")
        yield registry.url
    finally:
        registry.stop_sync()


# The registry's certificate verified against ssl_cafile: a schema registered over HTTPS.
async def test_a_registry_over_https_is_reached_trusting_its_ca(
    https_registry: str, pki: Pki
) -> None:
    settings = eosflow.SchemaRegistrySettings(url=https_registry, ssl_cafile=pki.ca)
    registry = Registry(settings)
    try:
        first = await registry.register("tls-t-value", "AVRO", SCHEMA)
        assert first == await registry.lookup("tls-t-value", "AVRO", SCHEMA)
    finally:
        await registry.close()


# A certificate the client does not trust is one line at once, naming the setting.
# Caught: the verification failure retried as a registry that does not answer (the
# error then came after retry_timeout_s, saying "did not answer").
async def test_an_untrusted_certificate_is_one_line_at_once(
    https_registry: str, pki: Pki, tmp_path: Path
) -> None:
    settings = eosflow.SchemaRegistrySettings(
        url=https_registry, ssl_cafile=pki.other_ca, retry_timeout_s=20
    )
    registry = Registry(settings)
    began = time.monotonic()
    try:
        with pytest.raises(eosflow.SchemaRegistryError) as caught:
            await registry.register("tls-u-value", "AVRO", SCHEMA)
    finally:
        await registry.close()
    assert time.monotonic() - began < 5
    message = str(caught.value)
    assert f"schema registry {https_registry}: its certificate is not trusted" in message
    assert "set ssl_cafile" in message and "\n" not in message
