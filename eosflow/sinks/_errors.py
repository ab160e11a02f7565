"""The sink's one error boundary: every asyncpg exception (and a socket's) mapped into
eosflow's tree, as the Kafka adapter maps aiokafka's.

- what no retry can fix and a user must: a refused login, an unknown database, a table
  or column the sink's SQL names that does not exist, a permission refused --
  ``ConfigError`` (``eosflow run`` exits 2), one line naming it;
- the database gone for a while: a refused or dropped connection, a server starting up,
  shutting down or recovering from a crash, too many connections, a timeout or a
  cancelled statement, a lock not available, a transaction rolled back (a serialization
  failure, a deadlock) or a statement's completion unknown (SQLSTATE 40003), a
  read-only server (a failover under way), a transaction ended idle, asyncpg's
  protocol state lost (``InternalClientError``: a server's message out of turn, as when
  a FATAL arrives between statements while the connection closes) --
  ``TransientError`` (the write transaction is rolled back and tried again, fatal once
  it persists past ``retry_timeout_s``; the connection is dropped and made anew:
  ``Database.step``);
- anything else the server refuses (a constraint violated, an SQL error in ``write``),
  and asyncpg's own client-side refusals (an argument of the wrong type) --
  ``FatalError`` naming the step and the message: trying again would fail the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import asyncpg

from .._errors import ConfigError, EosflowError, FatalError, TransientError

__all__ = ["DRIVER_ERRORS", "mapped"]

_USER_MUST_FIX = (
    asyncpg.InvalidPasswordError,
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.InvalidCatalogNameError,
    asyncpg.UndefinedTableError,
    asyncpg.UndefinedColumnError,
    asyncpg.InsufficientPrivilegeError,
)
# asyncpg's client-side mistakes (an argument of the wrong type, a bad setting): bugs of
# the sink's code, InterfaceErrors though they are
_CLIENT_BUGS = (
    asyncpg.exceptions._base.DataError,
    asyncpg.exceptions._base.ClientConfigurationError,
    asyncpg.exceptions._base.UnsupportedClientFeatureError,
)
_PASSING = (
    asyncpg.CannotConnectNowError,  # starting up, or recovering after a crash
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    # class 40: a serialization failure, a deadlock, and "statement completion unknown"
    # (40003: a COMMIT that may have gone through -- the write is read back)
    asyncpg.TransactionRollbackError,
    asyncpg.PostgresConnectionError,
    asyncpg.QueryCanceledError,  # a statement timeout, or cancelled by an operator
    asyncpg.LockNotAvailableError,
    asyncpg.ReadOnlySQLTransactionError,  # a standby promoted, the old primary read-only
    asyncpg.IdleInTransactionSessionTimeoutError,
    asyncpg.InterfaceError,  # a connection closed under a query, among others
    # the client's protocol state lost (its ProtocolError and OutdatedSchemaCacheError
    # too): the connection is useless, a new one works -- CI's chaos met "cannot switch
    # to state 15; another operation (2) is in progress" as PostgreSQL was SIGKILLed
    asyncpg.exceptions._base.InternalClientError,
)

# what the driver and the network raise: from a sink's own code, mapped as eosflow's are
DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions._base.InternalClientError,
    OSError,
    TimeoutError,
)


@contextlib.contextmanager
def mapped(step: str) -> Iterator[None]:
    """Run ``step`` with asyncpg's and the network's errors mapped into eosflow's."""
    try:
        yield
    except EosflowError:
        raise
    except _CLIENT_BUGS as exc:
        raise FatalError(f"PostgreSQL: {step}: {_one_line(exc)}") from exc
    except _USER_MUST_FIX as exc:
        raise ConfigError(f"PostgreSQL: {step}: {_one_line(exc)}") from exc
    except (*_PASSING, OSError, TimeoutError) as exc:
        raise TransientError(f"PostgreSQL: {step}", _one_line(exc)) from exc
    except asyncpg.PostgresError as exc:
        raise FatalError(f"PostgreSQL: {step}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
