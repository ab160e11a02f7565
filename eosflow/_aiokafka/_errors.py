"""The adapter's error boundary: every aiokafka exception and Kafka error code reaching
eosflow becomes an error of eosflow's tree here (``map_error``; ``mapped(step)`` around a
step). Fencing answers become ``Fenced`` (the session resolves them by KIP-360),
authorization failures ``AuthorizationError`` naming the permission and resource, a
refused SASL login or TLS handshake ``AuthenticationError``, broker
and network failures worth a retry ``TransientError``, anything else ``FatalError`` naming
the step. The code sets below say which answer is which."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator

from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced, for_code

from .._errors import (
    AuthenticationError,
    AuthorizationError,
    EosflowError,
    FatalError,
    TransientError,
)
from .._protocol import codes

UNKNOWN_SERVER_ERROR = codes.UNKNOWN_SERVER_ERROR
REQUEST_TIMED_OUT = codes.REQUEST_TIMED_OUT
NETWORK_EXCEPTION = codes.NETWORK_EXCEPTION
UNKNOWN_MEMBER_ID = codes.UNKNOWN_MEMBER_ID
REBALANCE_IN_PROGRESS = codes.REBALANCE_IN_PROGRESS
CONCURRENT_TRANSACTIONS = codes.CONCURRENT_TRANSACTIONS
UNSTABLE_OFFSET_COMMIT = codes.UNSTABLE_OFFSET_COMMIT
COORDINATOR_ERRORS = frozenset(
    {codes.COORDINATOR_LOAD_IN_PROGRESS, codes.COORDINATOR_NOT_AVAILABLE, codes.NOT_COORDINATOR}
)
FENCING = frozenset({codes.INVALID_PRODUCER_EPOCH, codes.PRODUCER_FENCED})
# answers worth sending the same request again for (within the step's time budget)
RETRY_CODES = COORDINATOR_ERRORS | {REQUEST_TIMED_OUT, NETWORK_EXCEPTION, CONCURRENT_TRANSACTIONS}
# broker answers that abort the transaction and retry it, rather than stop the app
TRANSIENT_CODES = RETRY_CODES | {
    UNKNOWN_SERVER_ERROR,
    codes.UNKNOWN_TOPIC_OR_PARTITION,  # metadata not yet propagated
    codes.LEADER_NOT_AVAILABLE,
    codes.NOT_LEADER_OR_FOLLOWER,
    codes.NOT_ENOUGH_REPLICAS,
    codes.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    REBALANCE_IN_PROGRESS,
    UNSTABLE_OFFSET_COMMIT,
    # the producer's own state is off (sequences, id mapping): a new epoch (KIP-360) fixes it
    codes.OUT_OF_ORDER_SEQUENCE_NUMBER,
    codes.INVALID_TXN_STATE,
    codes.INVALID_PRODUCER_ID_MAPPING,
    codes.UNKNOWN_PRODUCER_ID,
    codes.TRANSACTION_ABORTABLE,
}
# Kafka's authorization failures: the permission and resource kind each one means
AUTHORIZATION = {
    codes.TOPIC_AUTHORIZATION_FAILED: ("READ or WRITE", "a topic"),
    codes.GROUP_AUTHORIZATION_FAILED: ("READ", "the group"),
    codes.CLUSTER_AUTHORIZATION_FAILED: ("the needed ACL", "the cluster"),
    codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ("WRITE and DESCRIBE", "the transactional id"),
}


class Fenced(EosflowError):
    """The broker answered a fencing error (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
    either a newer instance owns the transactional id or our epoch timed out. Only the
    session can tell which (KIP-360); it never leaves the session."""


def map_error(exc: BaseException, step: str, topics: str | None = None) -> EosflowError:
    """eosflow's error for ``exc`` raised during ``step`` (see the module docstring).
    ``topics`` says what the step does to topics ("READ" or "WRITE"), so a topic
    authorization failure names the permission missing."""
    if isinstance(exc, EosflowError):
        return exc
    code = getattr(exc, "errno", None)
    if is_fencing(exc):
        return Fenced(f"{step}: {exc!r}")
    if isinstance(code, int) and code in AUTHORIZATION:
        permission, resource = AUTHORIZATION[code]
        if code == codes.TOPIC_AUTHORIZATION_FAILED:
            permission = topics or permission
            names = _topic_names(exc)
            resource = f"topic {', '.join(names)}" if names else resource
        return AuthorizationError(step, permission, resource, error_name(code))
    if is_refused_login(exc):
        # credentials or certificates: no retry can fix them (an OSError otherwise)
        return AuthenticationError(f"{step}: {_describe(exc)}")
    if type(exc).__name__ == "KafkaConnectionError" and "Unable to bootstrap" in str(exc):
        # none of the bootstrap servers answered while a client started: a wrong address
        # far more often than an outage; a retry loop would only hide it
        return FatalError(f"{step}: no bootstrap server answered ({_describe(exc)})")
    if isinstance(code, int) and code in TRANSIENT_CODES:
        return TransientError(step, error_name(code))
    if isinstance(exc, KafkaError) and (
        exc.retriable or type(exc).__name__ in ("KafkaError", "KafkaTimeoutError")
    ):
        # aiokafka's bare KafkaError wraps an error answer it gave up on (e.g. "Unexpected
        # error during batch delivery"): a retry of the transaction may do. Its
        # KafkaTimeoutError (not marked retriable) is a client-side wait that ran out:
        # a batch the accumulator could not take within the request timeout because the
        # partition's previous batch was not drained (its leader hung), or an offset
        # lookup: a broker outage, not a reason to stop
        return TransientError(step, _describe(exc))
    if isinstance(exc, (TimeoutError, OSError)):
        return TransientError(step, _describe(exc))
    if isinstance(exc, (IllegalOperation, AssertionError)) or type(exc).__name__ in (
        "IllegalStateError",
        "ConsumerStoppedError",
    ):
        # aiokafka's transaction manager or consumer in a state it cannot leave (e.g.
        # "Invalid state transition FATAL_ERROR -> ABORTING_TRANSACTION"): the session
        # replaces the producer (KIP-360) and goes on
        return TransientError(step, f"client state: {_describe(exc)}")
    if isinstance(exc, KafkaError):
        return FatalError(f"{step}: {_describe(exc)}")
    return FatalError(f"{step}: unexpected {_describe(exc)}")


@contextlib.contextmanager
def mapped(step: str, topics: str | None = None) -> Iterator[None]:
    """Run a step, mapping whatever it raises into eosflow's tree (cancellation passes);
    ``topics`` as for ``map_error``."""
    try:
        yield
    except EosflowError:
        raise
    except Exception as exc:
        raise map_error(exc, step, topics) from exc


def is_refused_login(exc: BaseException) -> bool:
    """Whether ``exc`` says the broker refused our SASL login, or either side refused a
    certificate: what no retry can fix."""
    return getattr(exc, "errno", None) == codes.SASL_AUTHENTICATION_FAILED or (
        is_certificate_refusal(exc)
    )


def is_certificate_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` (or the TLS error under aiokafka's connection error) is a refused
    certificate, ours or the broker's. Other TLS errors -- a connection cut mid-record
    (``SSLEOFError``) when a broker dies -- are network failures, retried as such."""
    tls = exc.__cause__ if type(exc).__name__ == "KafkaConnectionError" else exc
    if isinstance(tls, ssl.SSLCertVerificationError):
        return True
    reason = getattr(tls, "reason", None) or str(tls)
    return isinstance(tls, ssl.SSLError) and "CERTIFICATE" in reason.upper()


def _topic_names(exc: BaseException) -> list[str]:
    """The topics aiokafka names in a TopicAuthorizationFailedError (a name or a set)."""
    names: list[str] = []
    for arg in exc.args:
        if isinstance(arg, str) and arg and " " not in arg:
            names.append(arg)
        elif isinstance(arg, (set, frozenset, list, tuple)):
            names += sorted(str(a) for a in arg)
    return names


def _describe(exc: BaseException) -> str:
    text, kind = str(exc), type(exc).__name__
    if not text:
        return kind
    return text if text.startswith(kind) else f"{kind}: {text}"


def is_fencing(exc: BaseException) -> bool:
    """Whether ``exc`` says another producer owns the transactional id."""
    return getattr(exc, "errno", None) in FENCING or type(exc).__name__ == "ProducerFenced"


def error_name(code: int) -> str:
    """Kafka's name of an error code, e.g. ILLEGAL_GENERATION."""
    return codes.name(code)


def error_for(code: int, *args: object) -> KafkaError:
    """aiokafka's exception for a Kafka error code (for ``map_error``); ``args`` as
    aiokafka gives them, e.g. the set of topics a TOPIC_AUTHORIZATION_FAILED refused.
    PRODUCER_FENCED (InitProducerId v4+, EndTxn v2+...) has no class of its own there:
    ``for_code`` gives ``UnknownError``, which would read as UNKNOWN_SERVER_ERROR, a
    passing failure -- so it is the ``ProducerFenced`` aiokafka's sender raises."""
    if code == codes.PRODUCER_FENCED:
        return ProducerFenced()
    exc: KafkaError = for_code(code)(*args)
    return exc
