"""The aiokafka log summariser (``eosflow._logs``)."""

from __future__ import annotations

import logging
import time

from eosflow._ops._logs import RepeatSummary, summarised_aiokafka_logs


def record(msg: str, *args: object, name: str = "aiokafka.conn") -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)


def test_repeats_of_a_kind_are_dropped_within_the_window() -> None:
    f = RepeatSummary(window_s=3600)
    passed = [
        f.filter(record("Unable connect to node with id %d: port %d", 0, p)) for p in range(1000)
    ]
    assert passed.count(True) == 1 and passed[0]
    assert f.filter(record("Unable to update metadata from [0]"))  # another kind
    assert f.filter(record("Unable connect to node", name="aiokafka.other"))  # another logger


def test_after_the_window_one_line_carries_the_count() -> None:
    f = RepeatSummary(window_s=0.2)
    assert f.filter(record("Failed fetch messages from 0"))
    assert not any(f.filter(record("Failed fetch messages from 0")) for _ in range(41))
    time.sleep(0.25)  # the window passing is the behaviour under test
    last = record("Failed fetch messages from 0")
    assert f.filter(last)
    assert last.getMessage().startswith("Failed fetch messages from 0 [repeated 41 times in")


def test_the_filter_covers_every_aiokafka_logger_only_while_installed() -> None:
    child = logging.getLogger("aiokafka.consumer.fetcher")
    with summarised_aiokafka_logs() as f:
        assert f in child.filters and f in logging.getLogger("aiokafka").filters
        assert f not in logging.getLogger("eosflow.app").filters
    assert f not in child.filters
