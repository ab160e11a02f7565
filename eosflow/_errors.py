"""eosflow's errors. Third-party (aiokafka, pydantic) errors are mapped to these in the
session and the config; nothing else leaks out of ``EosApp.run()``.

    EosflowError                  base; ``retriable`` says whether running again can help
    ├── ConfigError               invalid settings (names the field)
    ├── FatalError                the app cannot go on; ``run()`` ends with it
    │   ├── ProducerFencedError   a newer instance owns the transactional id
    │   └── ProcessingError       the processor raised and the policy is "stop"
    └── TransactionError          retriable: the transaction was aborted and its input
        └── CommitOutcomeUnknown  will be consumed again; for the unknown case after
                                  the producer id was re-initialised
"""

from __future__ import annotations


class EosflowError(Exception):
    retriable: bool = False


class ConfigError(EosflowError, ValueError):
    pass


class FatalError(EosflowError):
    pass


class ProducerFencedError(FatalError):
    def __init__(self, transactional_id: str, detail: str = "") -> None:
        super().__init__(
            f"transactional id {transactional_id!r} is owned by a newer instance "
            f"(producer fenced{': ' + detail if detail else ''}); this instance must stop"
        )
        self.transactional_id = transactional_id


class ProcessingError(FatalError):
    def __init__(self, topic: str, partition: int, offset: int, cause: BaseException) -> None:
        super().__init__(
            f"processor failed on {topic}[{partition}]@{offset}: "
            f"{type(cause).__name__}: {cause}; transaction aborted, nothing past it committed"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.__cause__ = cause


class TransactionError(EosflowError):
    retriable = True


class CommitOutcomeUnknown(TransactionError):
    pass
