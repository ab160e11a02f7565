"""eosflow's errors. Every third-party error (aiokafka's exceptions, Kafka error codes,
pydantic's validation errors, asyncpg's, httpx's) is mapped into this tree in one place
each -- the adapter (``_aiokafka.map_error``), the config loader, the typed records'
decoder (``_typed``), the schema registry's client (``_schemas/_client.py``) and the
sinks' boundary (``sinks/_errors.py``) -- and nothing else leaves
``EosApp.run()`` (cancellation aside).

    EosflowError                  base; ``retriable`` says whether running again can help
    ├── ConfigError               invalid settings (names the field), a changelog
    │                             topic of the wrong shape (names it and its input), or
    │                             Spark executors whose Python lacks a package
    ├── FatalError                the app cannot go on; ``run()`` ends with it
    │   ├── ProducerFencedError   a newer instance owns the transactional id
    │   ├── AuthenticationError   a connection was refused: SASL credentials, or a TLS
    │   │                         certificate (ours or the broker's); names which
    │   ├── AuthorizationError    the broker refused a permission (names it and the resource)
    │   ├── ProcessingError       the processor raised and the policy is "stop"
    │   └── SchemaRegistryError   the schema registry refused a request or did not answer
    │       │                     within retry_timeout_s (names it, never its credentials)
    │       └── IncompatibleSchemaError  a schema its subject's compatibility refuses
    ├── DecodeError               a record's key or value does not decode as its topic
    │                             declares (names the field): dead-lettered, or the
    │                             policy "stop" makes it a ProcessingError
    └── TransactionError          retriable: the transaction was aborted and its input
        ├── TransientError        will be consumed again. A broker or network failure
        │                         of one step (names it); retried with a growing
        │                         backoff, fatal once it persists past ``retry_timeout_s``
        └── SchemaPending         a table row named a schema id not fetched yet: fetched,
                                  and the transaction redone (not shrunk)

An EndTxn whose outcome is unknown raises nothing: the session resolves it (KIP-360) and
reports ``Outcome.RECOVERED``; only a recovery that cannot reach the broker raises
``TransientError``. ``retriable`` is what ``run()``'s callers (and the produce checks) go
by: ``TransactionError``s are retried inside ``run()``; what leaves it never is.
"""

from __future__ import annotations

from typing import Any


class EosflowError(Exception):
    retriable: bool = False


class ConfigError(EosflowError, ValueError):
    pass


class FatalError(EosflowError):
    pass


class ProducerFencedError(FatalError):
    def __init__(self, transactional_id: str, detail: str = "", *, timed_out: bool = False) -> None:
        """``timed_out``: the broker fenced the producer, most likely for a transaction
        it timed out, and no newer instance was seen (a broker without KIP-360 fences
        both alike): said so, instead of "owned by a newer instance"."""
        why = (
            "was fenced by the broker: the transaction most likely outlived "
            "transaction_timeout_s, which a broker without KIP-360 (before Kafka 2.5) "
            "answers as it answers a newer instance, and none was seen"
            if timed_out
            else "is owned by a newer instance"
        )
        super().__init__(
            f"transactional id {transactional_id!r} {why} "
            f"(producer fenced{': ' + detail if detail else ''}); this instance must stop"
        )
        self.transactional_id = transactional_id


class AuthenticationError(FatalError):
    pass


class AuthorizationError(FatalError):
    def __init__(self, step: str, permission: str, resource: str, detail: str = "") -> None:
        super().__init__(
            f"{step}: not authorized: the broker refused {permission} on {resource}"
            f"{' (' + detail + ')' if detail else ''}"
        )
        self.permission = permission
        self.resource = resource


class ProcessingError(FatalError):
    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        cause: BaseException,
        timer: bytes | None = None,
    ) -> None:
        """``timer``: the key of the wall-clock timer whose ``fire`` failed (``offset``
        then -1: no record)."""
        on = (
            f"on {topic}[{partition}]@{offset}"
            if timer is None
            else f"firing the wall-clock timer of key {timer!r} of {topic}[{partition}]"
        )
        what = "record did not decode" if isinstance(cause, DecodeError) else "processor failed"
        super().__init__(
            f"{what} {on}: "
            f"{type(cause).__name__}: {cause}; transaction aborted, nothing past it "
            "committed (a restart meets the same record: set dead_letter_topic -- "
            "EOSFLOW_DEAD_LETTER_TOPIC, --dead-letter-topic -- to send such records there "
            "and go on)"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.__cause__ = cause


class SchemaRegistryError(FatalError):
    """The schema registry refused a request -- credentials, a schema it finds invalid,
    one not registered while ``auto_register`` is off -- or did not answer within
    ``retry_timeout_s``. Names the registry (its URL, which carries no credentials), the
    subject or schema id, and the registry's own reason."""


class IncompatibleSchemaError(SchemaRegistryError):
    """A schema the compatibility rule of its subject refuses (HTTP 409): ``subject``,
    and the registry's reason (which field, which rule)."""

    def __init__(self, url: str, subject: str, reason: str) -> None:
        super().__init__(
            f"schema registry {url} refused the schema of subject {subject!r} as "
            f"incompatible with its registered versions: {reason}"
        )
        self.subject = subject


class DecodeError(EosflowError, ValueError):
    """A consumed record's key or value does not decode as its topic declares
    (``Processor.topics``). Raised before ``process`` runs and taken as any processing
    error: dead-lettered (the record as written, ``field`` in the ``eosflow.error.field``
    header) or, without a dead-letter topic, the app stops naming the record and the
    field. ``field``: ``key`` or ``value``, then the path inside it (``value.items.0.qty``)."""

    def __init__(
        self, topic: str, partition: int, offset: int, field: str, expected: str, reason: str
    ) -> None:
        super().__init__(f"{field} is not {expected}: {reason}")
        self.topic, self.partition, self.offset = topic, partition, offset
        self.field, self.expected, self.reason = field, expected, reason


class TransactionError(EosflowError):
    retriable = True
    #: whether the transactions after it hold fewer records (a processor asking for a
    #: retry may be struggling with the batch's size; a fetched schema is not)
    shrink = True


class TransientError(TransactionError):
    """A broker or network failure of one step (``step``), worth retrying."""

    def __init__(self, step: str, cause: str) -> None:
        super().__init__(f"{step}: {cause}")
        self.step = step
        self.cause = cause


class SchemaPending(TransactionError):
    """A table's row or a store's value read in the transaction names a schema id this
    process has not
    fetched, and a read cannot await the registry: the fetch is started (``pending``,
    an awaitable) and the transaction aborted, to be redone as it was once the schema
    is there. A fetch that fails is raised by the next read of that id."""

    shrink = False

    def __init__(self, schema_id: int, pending: Any) -> None:
        super().__init__(
            f"a value read names schema id {schema_id}, not fetched yet: fetching it; "
            "the transaction is redone"
        )
        self.schema_id, self.pending = schema_id, pending
