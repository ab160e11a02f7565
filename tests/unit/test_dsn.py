"""``eosflow.sinks._dsn.Dsn`` (issue 51.2): both forms libpq takes parse to the same
connection, the password is kept apart from everything shown, and a malformed string is
one line naming the setting -- never the string."""

from __future__ import annotations

import pytest

from eosflow import ConfigError
from eosflow.sinks._dsn import Dsn

SECRET = "pa ss'wo@rd/?&=%"


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://app:pa%20ss%27wo%40rd%2F%3F%26%3D%25@db.example:6543/orders?sslmode=disable",
        "postgres://app@db.example:6543/orders?sslmode=disable&password=pa+ss%27wo%40rd%2F%3F%26%3D%25",
        r"host=db.example port=6543 user=app password='pa ss\'wo@rd/?&=%' dbname=orders"
        " sslmode=disable",
        r"  dbname = orders  host=db.example port= 6543 password = 'pa ss\'wo@rd/?&=%' "
        "user=app sslmode=disable ",
    ],
)
def test_both_forms_give_one_connection_and_hide_the_password(text: str) -> None:
    dsn = Dsn.parse(text, "EOSFLOW_POSTGRES_DSN")
    assert dsn.password == SECRET
    assert dsn.connect_args() == {
        "dsn": "postgresql://app@db.example:6543/orders?sslmode=disable",
        "password": SECRET,
    }
    for shown in (dsn.shown, str(dsn), repr(dsn)):
        assert "pa ss" not in shown and "pa%20ss" not in shown and "pa+ss" not in shown


def test_several_hosts_and_no_password() -> None:
    dsn = Dsn.parse("host=a,b port=1,2 dbname=x", "S")
    assert dsn.connect_args() == {"dsn": "postgresql://a:1,b:2/x"}
    assert Dsn.parse("postgresql://u@a:1,b:2/x", "S").connect_args() == {
        "dsn": "postgresql://u@a:1,b:2/x"
    }
    assert Dsn.parse("postgresql://[::1]:5432/x", "S").uri() == "postgresql://[::1]:5432/x"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("postgresql://u:s3cr3t@h:port/db", "a port is not a number"),
        ("host=h port=54x32 password=s3cr3t", "a port is not a number"),
        ("host=h password='s3cr3t", "quoted value of password is not closed"),
        ("mysql://u:s3cr3t@h/db", "not a PostgreSQL connection string"),
        ("just s3cr3t words", "not a PostgreSQL connection string"),
        ("postgresql://u:s3cr3t@h/db?a&b", "query"),
        ("   ", "empty"),
    ],
)
def test_a_malformed_string_is_one_line_naming_the_setting_not_the_string(
    text: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Dsn.parse(text, "EOSFLOW_POSTGRES_DSN")
    message = str(caught.value)
    assert message.startswith("EOSFLOW_POSTGRES_DSN: ") and says in message, message
    assert "\n" not in message and "s3cr3t" not in message
