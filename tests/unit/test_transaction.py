"""``Transaction.mark``: offsets only grow (invariant 22)."""

import pytest

from eosflow import FatalError
from eosflow._engine._transaction import Transaction


def test_offsets_only_grow() -> None:
    txn = Transaction(epoch=1, identity=None, deadline=0.0)
    txn.mark({("in", 0): 5}, committed={})
    txn.mark({("in", 0): 9, ("in", 1): 1}, committed={})
    with pytest.raises(FatalError, match=r"in\[0\] would be 9, not past what this transaction"):
        txn.mark({("in", 0): 9}, committed={})
    assert txn.consumed == {("in", 0): 9, ("in", 1): 1}, "a refused mark changes nothing"


def test_offsets_start_past_the_committed_one() -> None:
    txn = Transaction(epoch=1, identity=None, deadline=0.0)
    with pytest.raises(FatalError, match=r"in\[0\] would be 10, not past its committed"):
        txn.mark({("in", 0): 10}, committed={("in", 0): 10})
    txn.mark({("in", 0): 11}, committed={("in", 0): 10})
    assert txn.consumed == {("in", 0): 11}
