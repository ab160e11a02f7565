"""The user's side of eosflow: subclass ``Processor`` and override ``process``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ._records import Output, Record

if TYPE_CHECKING:
    from ._config import EosConfig

ProcessResult = Output | Iterable[Output] | None


class Processor:
    """Transforms consumed records into outputs, inside eosflow's transactions.

    ``process`` is called once per record (in offset order within a partition) and
    returns None, one ``Output`` or an iterable of them. Everything it returns for the
    records of one transaction is produced and committed atomically with their offsets.
    A record may be processed more than once (after an abort or a crash, or when work
    done ahead of a commit is dropped -- see ``EosConfig.process_ahead``), but its outputs
    become visible to read_committed readers exactly once, so ``process`` must not have
    side effects outside Kafka that cannot be repeated.

    Override ``process_batch`` to transform a whole transaction's records at once (the
    Spark offload does); the default calls ``process`` for each record.
    """

    async def process(self, record: Record) -> ProcessResult:
        raise NotImplementedError("override Processor.process or Processor.process_batch")

    async def process_batch(self, records: Sequence[Record]) -> list[Output]:
        out: list[Output] = []
        for record in records:
            out.extend(as_outputs(await self.process(record)))
        return out

    def configure(self, config: EosConfig) -> None:
        """Called once with the app's config, before ``on_start``."""

    async def on_start(self) -> None:
        """Called once before the first record."""

    async def on_stop(self) -> None:
        """Called once after the last transaction ended."""

    async def on_assigned(self, partitions: frozenset[tuple[str, int]]) -> None:
        """Partitions newly assigned, after their committed offsets were fetched."""

    async def on_revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        """Partitions about to move away, after any transaction in flight has ended."""


def as_outputs(result: ProcessResult) -> list[Output]:
    if result is None:
        return []
    if isinstance(result, Output):
        return [result]
    out = list(result)
    for item in out:
        if not isinstance(item, Output):
            raise TypeError(f"process() returned {type(item).__name__}, expected Output")
    return out


def overrides_batch(processor: Processor) -> bool:
    return type(processor).process_batch is not Processor.process_batch
