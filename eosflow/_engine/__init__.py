"""The engine: franz-go's GroupTransactSession on aiokafka, and the one transaction cycle
that runs on it -- begin, poll, process, send, commit -- owned by ``Engine`` (``_cycle``).

One room, one concern. ``EosApp`` (``eosflow/_app.py``) starts an ``Engine`` with the
processor, runs it and stops it; nothing of a transaction crosses back into the app.
What the engine holds:

- ``_cycle``: ``Engine``, the transaction loop (chunked processing, work done ahead of a
  commit, the error policy per record, the retry of a transaction a processor asked for);
- ``_session``: ``TransactSession``, the group membership, the read_committed consumer
  and the transactional producer of one instance; the decision to commit or abort, and
  the recovery; ``_end``: the end's steps (flush, offsets, heartbeat, EndTxn) and what
  an unknown outcome becomes;
- ``_positions``: which partitions are held and ready, their committed offsets, the
  assignment epoch; ``_transaction``: the one open transaction;
- ``_membership`` and ``_commit``: the two group protocols, and the commit's membership
  steps (TxnOffsetCommit, the forced heartbeat); ``_protocols``: which protocol
  generations a session speaks;
- ``_sizing``: how many records a poll and a transaction take; ``_failures``: the backoff,
  the give-up rule and a dead letter's copy; ``_collector``: the garbage collector while
  an app runs.

Below it: the adapter (``_aiokafka``), the stores (``_state``), the observer seam
(``_observe``). Above it: the app, the command line.
"""

from ._collector import collecting
from ._cycle import Engine
from ._failures import dead_letter

__all__ = ["Engine", "collecting", "dead_letter"]
