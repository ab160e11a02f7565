"""``Dsn``: a PostgreSQL connection string, parsed once, its password kept apart.

Accepted as libpq accepts them (and psycopg's users write them): the URI form
``postgresql://user:password@host:port,host2:port2/dbname?sslmode=require`` (also
``postgres://``, the password possibly in the query as ``?password=``), and the
``key=value`` form ``host=db port=5432 user=app password='s3 cret' dbname=orders``
(values quoted with single quotes, ``\\'`` and ``\\\\`` inside them).

What asyncpg gets is a URI without the password, and the password as an argument of its
own (``connect_args``); what any message shows is ``shown``, the same URI: no log line,
error or page ever carries the password, whichever form it came in. A string that is
not one of the two forms, or a port that is not a number, is a ``ConfigError`` naming
the setting and what is wrong with it -- never the string itself.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field

from .._errors import ConfigError

__all__ = ["Dsn"]

_SCHEMES = ("postgresql://", "postgres://")
_KEY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")
_PASSWORD_KEYS = frozenset({"password"})
_NETWORK_KEYS = frozenset({"host", "hostaddr", "port", "user", "dbname"})


@dataclass(frozen=True)
class Dsn:
    hosts: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None
    params: tuple[tuple[str, str], ...] = ()  # the other options (sslmode, ...), in order

    @classmethod
    def parse(cls, text: str, setting: str) -> Dsn:
        """``text`` in either form, or a ``ConfigError`` naming ``setting``."""
        stripped = text.strip()
        if not stripped:
            raise ConfigError(f"{setting}: empty; a postgresql:// URI or key=value pairs")
        if stripped.startswith(_SCHEMES):
            return cls._from_uri(stripped, setting)
        if "://" in stripped.split("=", 1)[0]:
            raise ConfigError(
                f"{setting}: not a PostgreSQL connection string (a postgresql:// URI or "
                "libpq's key=value pairs)"
            )
        return cls._from_pairs(stripped, setting)

    @classmethod
    def _from_uri(cls, text: str, setting: str) -> Dsn:
        rest = text.split("://", 1)[1]
        rest, _, query = rest.partition("?")
        netloc, _, path = rest.partition("/")
        auth, at, hostspec = netloc.rpartition("@")
        user = password = None
        if at:
            raw_user, colon, raw_password = auth.partition(":")
            user = urllib.parse.unquote(raw_user) or None
            password = urllib.parse.unquote(raw_password) if colon else None
        hosts, ports = [], []
        for spec in (s for s in hostspec.split(",") if s):
            if spec.startswith("["):  # [ipv6]:port
                host, _, tail = spec[1:].partition("]")
                port = tail[1:] if tail.startswith(":") else ""
            else:
                host, _, port = spec.partition(":")
            hosts.append(urllib.parse.unquote(host))
            if port:
                ports.append(_port(port, setting))
        try:
            pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=True)
        except ValueError:
            raise ConfigError(f"{setting}: its query (after ?) is not key=value pairs") from None
        params = []
        for key, value in pairs:
            if key in _PASSWORD_KEYS:
                password = value
            elif key == "user":
                user = value
            elif key in ("host", "port", "dbname"):
                raise ConfigError(f"{setting}: give {key} in the URI's body, not its query")
            else:
                params.append((key, value))
        database = urllib.parse.unquote(path) or None
        return cls(tuple(hosts), tuple(ports), user, password, database, tuple(params))

    @classmethod
    def _from_pairs(cls, text: str, setting: str) -> Dsn:
        values: dict[str, str] = {}
        params = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            key_match = _KEY.match(text, pos)
            if key_match is None:
                raise ConfigError(
                    f"{setting}: not a PostgreSQL connection string (a postgresql:// URI "
                    "or libpq's key=value pairs)"
                )
            key = key_match.group(1)
            value, pos = _value(text, key_match.end(), key, setting)
            if key in _PASSWORD_KEYS or key in _NETWORK_KEYS:
                values[key] = value
            else:
                params.append((key, value))
        hosts = tuple(h for h in values.get("host", values.get("hostaddr", "")).split(",") if h)
        ports = tuple(_port(p, setting) for p in values.get("port", "").split(",") if p)
        return cls(
            hosts,
            ports,
            values.get("user") or None,
            values.get("password"),
            values.get("dbname") or None,
            tuple(params),
        )

    def uri(self) -> str:
        """This DSN as a URI for asyncpg, without its password (``connect_args``)."""
        quote = urllib.parse.quote
        netloc = quote(self.user, safe="") + "@" if self.user else ""
        specs = []
        for i, host in enumerate(self.hosts or ("",)):
            shown = f"[{host}]" if ":" in host else quote(host, safe="/")
            port = self.ports[i] if i < len(self.ports) else (self.ports[-1:] or [None])[0]
            specs.append(f"{shown}:{port}" if port is not None else shown)
        if not self.hosts and self.ports:
            specs = [f":{self.ports[0]}"]
        path = "/" + quote(self.database, safe="") if self.database else ""
        query = "?" + urllib.parse.urlencode(self.params) if self.params else ""
        return f"postgresql://{netloc}{','.join(specs)}{path}{query}"

    def connect_args(self) -> dict[str, str]:
        """What asyncpg's ``connect`` takes: the URI, and the password apart."""
        args = {"dsn": self.uri()}
        if self.password is not None:
            args["password"] = self.password
        return args

    @property
    def shown(self) -> str:
        """The DSN as messages show it: the URI, never the password."""
        return self.uri()

    def __str__(self) -> str:
        return self.shown


def _port(text: str, setting: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise ConfigError(f"{setting}: a port is not a number from 1 to 65535")
    return int(text)


def _value(text: str, pos: int, key: str, setting: str) -> tuple[str, int]:
    """The value of ``key`` starting at ``pos``: quoted ('...', with \\' and \\\\) or up
    to the next space; and where the next pair starts."""
    if text.startswith("'", pos):
        out, i = [], pos + 1
        while i < len(text):
            ch = text[i]
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 2
            elif ch == "'":
                return "".join(out), i + 1
            else:
                out.append(ch)
                i += 1
        raise ConfigError(f"{setting}: the quoted value of {key} is not closed")
    end = pos
    while end < len(text) and not text[end].isspace():
        end += 1
    value = text[pos:end]
    if "=" in value and key not in _PASSWORD_KEYS:
        raise ConfigError(f"{setting}: the value of {key} runs into another key=value")
    return value, end
