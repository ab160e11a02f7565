"""The transaction coordinator of the test cluster (KIP-98, with KIP-360 and KIP-588).

Per transactional id: producer id, epoch, state (Empty, Ongoing, PrepareCommit,
PrepareAbort, CompleteCommit, CompleteAbort), the partitions and groups in the open
transaction and its start time.

Timing that matters to clients is modelled, because the runtime defends against it:
- EndTxn answers once the decision is made; markers reach the data partitions
  ``marker_delay_s`` later. Until then the transaction is Prepare*, and the next
  AddPartitionsToTxn/AddOffsetsToTxn/InitProducerId gets CONCURRENT_TRANSACTIONS.
- The group coordinator applies the committed offsets ``offset_lag_s`` after EndTxn
  (genuine Kafka 4.0 was measured showing the previous offset for up to ~20 ms). Until
  then a non-stable OffsetFetch returns the old offset and a stable one answers
  UNSTABLE_OFFSET_COMMIT.
- ``marker_lag`` (topic -> seconds; empty unless a test sets it, see
  ``FakeCluster.delay_markers``): the markers of that topic's partitions land that much
  later than the rest, as when a partition's leader is slow or moving (a broker
  restarting) on a cluster of several brokers. The group coordinator may then apply a
  transaction's offsets before its data partitions show it committed; the transaction
  completes once the last marker is written.
- A sweep every ``sweep_interval_s`` aborts transactions open longer than their timeout,
  bumping the epoch, so the timed-out producer is fenced (Kafka's default sweep is 10 s).

Fencing errors by version, as Kafka answers: PRODUCER_FENCED for InitProducerId v4+,
AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2+ and TxnOffsetCommit v3+; INVALID_PRODUCER_EPOCH
for older versions.

Transactions v2 (KIP-890 part 2), as genuine 4.4.0 answers it -- to the request's
version wherever the cluster finalizes ``transaction.version`` >= 1 (``v2_served``; genuine
4.4.0 served all of the below at level 1, which tells clients to send v1; at level 0 it
answered Produce v12 UNSUPPORTED_VERSION, modelled, and EndTxn and TxnOffsetCommit v5
CONCURRENT_TRANSACTIONS, not modelled: they get the v1 rules here): EndTxn v5 bumps the
epoch before the markers are written (they carry the new one, so a zombie's late write at
the old epoch is refused) and answers the producer id and epoch to use next; the same
EndTxn resent with the previous epoch answers the same outcome again, the other result
INVALID_TXN_STATE. An abort with nothing open bumps the epoch too (a commit is
INVALID_TXN_STATE). Produce v12 and TxnOffsetCommit v5 add their partition or group to the
transaction implicitly (opening it), CONCURRENT_TRANSACTIONS while the last one's markers
are written. Older versions keep the v1 rules on the same cluster.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._protocol import codes
from .._records import Partition
from ._groups import GroupCoordinator
from ._log import PartitionLog

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"

MAX_TRANSACTION_TIMEOUT_MS = 900_000


@dataclass(frozen=True)
class TxnSettings:
    marker_delay_s: float = 0.002
    # committed offsets reach a non-stable OffsetFetch this long after EndTxn: median
    # 3-5 ms measured on genuine 2.4.1, 4.0.0 and 4.4.0 (docs/design.md)
    offset_lag_s: float = 0.005
    sweep_interval_s: float = 10.0


@dataclass(eq=False)
class TxnMeta:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    last_epoch: int = -1
    state: str = EMPTY
    partitions: set[Partition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    started: float = 0.0
    started_ms: float = 0.0  # the same start, epoch ms (DescribeTransactions)
    token: int = 0


def fenced(version: int, new_since: int) -> int:
    return codes.PRODUCER_FENCED if version >= new_since else codes.INVALID_PRODUCER_EPOCH


class TxnCoordinator:
    def __init__(
        self,
        settings: TxnSettings,
        groups: GroupCoordinator,
        log_for: Callable[[Partition], PartitionLog | None],
    ) -> None:
        self.settings = settings
        self.groups = groups
        self.log_for = log_for
        self.txns: dict[str, TxnMeta] = {}
        self._pids = itertools.count(1000)
        self._tokens = itertools.count(1)
        # for tests watching progress: transactions ended so far (e.g. aborts climbing),
        # and KIP-360 re-initialisations (InitProducerId naming the current id)
        self.commits = 0
        self.aborts = 0
        self.reinits = 0
        self.marker_lag: dict[str, float] = {}
        # whether the v2 rules apply (the cluster sets it: transaction.version >= 1)
        self.v2_served: Callable[[], bool] = lambda: True
        self.concurrent_writes = 0  # Produce v12 answered CONCURRENT_TRANSACTIONS (_handlers_log)

    # --- producer ids -----------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int,
        producer_id: int,
        epoch: int,
        version: int,
    ) -> tuple[int, int, int]:
        if transactional_id is None:
            return codes.NONE, next(self._pids), 0
        if not 0 < timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
            return codes.INVALID_TRANSACTION_TIMEOUT, -1, -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = TxnMeta(transactional_id, next(self._pids), 0, timeout_ms)
            self.txns[transactional_id] = meta
            return codes.NONE, meta.producer_id, meta.epoch
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return codes.CONCURRENT_TRANSACTIONS, -1, -1
        if producer_id >= 0:
            self.reinits += 1
            # KIP-360: the caller names its current id and epoch; a retry after the
            # coordinator bumped the epoch itself (timeout abort) is also accepted.
            if producer_id != meta.producer_id or epoch not in (meta.epoch, meta.last_epoch):
                return fenced(version, 4), -1, -1
            if epoch == meta.last_epoch and meta.state != ONGOING:
                meta.last_epoch = -1
                meta.timeout_ms = timeout_ms
                return codes.NONE, meta.producer_id, meta.epoch
        if meta.state == ONGOING:
            self._bump(meta)
            self._end(meta, commit=False, immediate=True)
        self._bump(meta)
        if producer_id < 0:
            meta.last_epoch = -1  # a new incarnation: the previous epoch is fenced for good
        meta.timeout_ms = timeout_ms
        meta.state = EMPTY
        return codes.NONE, meta.producer_id, meta.epoch

    def forget_last_epochs(self) -> None:
        """What a coordinator taking over knows: the log's state, no last epoch."""
        for meta in self.txns.values():
            meta.last_epoch = -1

    def _bump(self, meta: TxnMeta) -> None:
        meta.last_epoch = meta.epoch
        if meta.epoch >= 32766:
            meta.producer_id, meta.epoch = next(self._pids), 0
        else:
            meta.epoch += 1

    # --- transaction membership -------------------------------------------------------

    def _check(self, txn_id: str, producer_id: int, epoch: int, version: int) -> TxnMeta | int:
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return codes.INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.epoch:
            return fenced(version, 2)
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return codes.CONCURRENT_TRANSACTIONS
        return meta

    def _open(self, meta: TxnMeta) -> None:
        if meta.state != ONGOING:
            meta.state = ONGOING
            meta.started = time.monotonic()
            meta.started_ms = time.time() * 1000
            meta.partitions = set()
            meta.groups = set()
            meta.token = next(self._tokens)

    def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[Partition],
        version: int,
    ) -> dict[Partition, int]:
        meta = self._check(txn_id, producer_id, epoch, version)
        if isinstance(meta, int):
            return dict.fromkeys(partitions, meta)
        unknown = [tp for tp in partitions if self.log_for(tp) is None]
        if unknown:
            return {
                tp: codes.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else codes.OPERATION_NOT_ATTEMPTED
                for tp in partitions
            }
        self._open(meta)
        meta.partitions.update(partitions)
        return dict.fromkeys(partitions, codes.NONE)

    def add_offsets(
        self, txn_id: str, producer_id: int, epoch: int, group_id: str, version: int
    ) -> int:
        meta = self._check(txn_id, producer_id, epoch, version)
        if isinstance(meta, int):
            return meta
        self._open(meta)
        meta.groups.add(group_id)
        return codes.NONE

    def txn_offset_commit(
        self,
        txn_id: str,
        group_id: str,
        producer_id: int,
        epoch: int,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[Partition, tuple[int, str | None]],
        version: int,
    ) -> int:
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return codes.INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.epoch:
            return fenced(version, 3)
        if version >= 5 and self.v2_served():  # the group joins implicitly (transactions v2)
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                return codes.CONCURRENT_TRANSACTIONS
            self._open(meta)
            meta.groups.add(group_id)
        if meta.state != ONGOING or group_id not in meta.groups:
            return codes.INVALID_TXN_STATE
        return self.groups.txn_commit(
            group_id, meta.token, generation, member_id, instance_id, offsets
        )

    def is_member(self, producer_id: int, epoch: int, tp: Partition, version: int) -> int:
        """Whether a transactional Produce of ``version`` to ``tp`` is allowed (KIP-890
        part 1 verification): the producer's transaction must be open and contain ``tp``,
        else INVALID_TXN_STATE (v11+: TRANSACTION_ABORTABLE, as genuine 4.4.0 answers).
        v12 under transactions v2 adds ``tp`` itself."""
        for meta in self.txns.values():
            if meta.producer_id == producer_id:
                if epoch < meta.epoch:
                    return codes.INVALID_PRODUCER_EPOCH
                if version >= 12 and not self.v2_served():
                    return codes.UNSUPPORTED_VERSION
                if version >= 12 and epoch == meta.epoch:  # transactions v2
                    if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                        return codes.CONCURRENT_TRANSACTIONS
                    self._open(meta)
                    meta.partitions.add(tp)
                if meta.state != ONGOING or tp not in meta.partitions:
                    return codes.TRANSACTION_ABORTABLE if version >= 11 else codes.INVALID_TXN_STATE
                return codes.NONE
        return codes.INVALID_PRODUCER_ID_MAPPING

    # --- ending ---------------------------------------------------------------------

    def end_txn(
        self, txn_id: str, producer_id: int, epoch: int, commit: bool, version: int
    ) -> tuple[int, int, int]:
        """(error code, producer id, epoch to use next); the last two are -1 unless
        transactions v2 (EndTxn v5), which bumps the epoch."""
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return codes.INVALID_PRODUCER_ID_MAPPING, -1, -1
        v2 = version >= 5 and self.v2_served()
        ended = (PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)
        if v2 and epoch == meta.last_epoch and meta.state in ended:
            # the same EndTxn again (its answer was lost): the bumped epoch is known
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                return codes.CONCURRENT_TRANSACTIONS, -1, -1
            if meta.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
                return codes.NONE, meta.producer_id, meta.epoch
            return codes.INVALID_TXN_STATE, -1, -1
        if epoch != meta.epoch:
            return fenced(version, 2), -1, -1
        if v2 and meta.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
            # nothing open (no write or offset reached the broker): an abort still bumps
            # the epoch, a commit is INVALID_TXN_STATE (genuine 4.4.0)
            if commit:
                return codes.INVALID_TXN_STATE, -1, -1
            self._bump(meta)
            meta.state = COMPLETE_ABORT
            return codes.NONE, meta.producer_id, meta.epoch
        if meta.state == ONGOING:
            # v2 bumps before the markers: they carry the next epoch and fence the old one,
            # under the producer id that wrote the data (the bump may rotate it at the top)
            marker = (meta.producer_id, meta.epoch + 1) if v2 else None
            if v2:
                self._bump(meta)
            self._end(meta, commit, immediate=False, marker=marker)
            return (codes.NONE, meta.producer_id, meta.epoch) if v2 else (codes.NONE, -1, -1)
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            # either result while markers are written (2.4.1 and 4.4.0 alike)
            return codes.CONCURRENT_TRANSACTIONS, -1, -1
        if meta.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            same = (meta.state == COMPLETE_COMMIT) == commit
            return (codes.NONE, -1, -1) if same else (codes.INVALID_TXN_STATE, -1, -1)
        return codes.INVALID_TXN_STATE, -1, -1

    def _end(
        self,
        meta: TxnMeta,
        commit: bool,
        immediate: bool,
        marker: tuple[int, int] | None = None,
    ) -> None:
        """Decide the open transaction; its markers carry ``marker`` (producer id, epoch;
        default the producer's now)."""
        if commit:
            self.commits += 1
        else:
            self.aborts += 1
        meta.state = PREPARE_COMMIT if commit else PREPARE_ABORT
        partitions, groups, token = set(meta.partitions), set(meta.groups), meta.token
        pid, epoch = marker or (meta.producer_id, meta.epoch)

        def write_markers(tps: set[Partition], last: bool) -> None:
            for tp in tps:
                log = self.log_for(tp)
                if log is not None:
                    log.write_marker(pid, epoch, commit)
            if meta.token == token:
                meta.partitions -= tps  # marked: no longer described as in the transaction
            if last and meta.state in (PREPARE_COMMIT, PREPARE_ABORT) and meta.token == token:
                meta.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT

        def apply_offsets() -> None:
            for group_id in groups:
                self.groups.complete_txn(group_id, token, commit)

        if immediate:
            write_markers(partitions, last=True)
            apply_offsets()
            return
        loop = asyncio.get_running_loop()
        s = self.settings
        lags = {tp: self.marker_lag.get(tp[0], 0.0) for tp in partitions}
        slowest = max(lags.values(), default=0.0)
        for lag in sorted(set(lags.values())):
            tps = {tp for tp, t in lags.items() if t == lag}
            _later(
                loop, s.marker_delay_s + lag, functools.partial(write_markers, tps, lag == slowest)
            )
        if not partitions:
            _later(loop, s.marker_delay_s, functools.partial(write_markers, set(), True))
        _later(loop, max(s.offset_lag_s, s.marker_delay_s), apply_offsets)

    def abort_expired(self) -> list[str]:
        """Abort every transaction open longer than its timeout; returns their ids."""
        now = time.monotonic()
        expired = []
        for meta in self.txns.values():
            if meta.state == ONGOING and now - meta.started > meta.timeout_ms / 1000:
                self._bump(meta)
                self._end(meta, commit=False, immediate=True)
                expired.append(meta.transactional_id)
        return expired


def _later(loop: asyncio.AbstractEventLoop, delay: float, fn: Callable[[], None]) -> None:
    if delay <= 0:
        fn()
    else:
        loop.call_later(delay, fn)
