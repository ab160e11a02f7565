"""The checkers users run from outside an app: ``eosflow check`` and the test kit's
``check_exactly_once`` (``_checker``), ``check_state`` and ``check_counts``
(``_state_check``). Neither the command's ``run`` nor ``check`` path imports the test kit."""

from ._checker import CheckReport, check_exactly_once, partitions_of, read_topic
from ._join_check import expected_join, join_of
from ._state_check import StateReport, check_counts, check_state
from ._window_check import WindowReport, check_windows, expected_windows

__all__ = [
    "CheckReport",
    "StateReport",
    "WindowReport",
    "check_counts",
    "check_exactly_once",
    "check_state",
    "check_windows",
    "expected_join",
    "expected_windows",
    "join_of",
    "partitions_of",
    "read_topic",
]
