"""The one cancellation check: installed by whoever runs the work, polled cheaply by the loops."""

from __future__ import annotations

import threading
import time

import pytest

from trainers.sdk.cancel import Cancelled, Poll, cancellable, check_cancel, stop_requested


def test_without_a_check_nothing_is_ever_cancelled():
    assert not stop_requested()
    check_cancel()  # no check installed: never raises


def test_a_check_raises_once_asked_and_is_gone_after_the_block():
    asked = threading.Event()
    with cancellable(asked.is_set, interval_s=0):
        check_cancel()
        asked.set()
        with pytest.raises(Cancelled):
            check_cancel()
    check_cancel()


def test_the_callable_is_asked_at_most_once_per_interval_and_a_yes_sticks():
    calls = []

    def should_stop() -> bool:
        calls.append(time.monotonic())
        return len(calls) >= 2

    poll = Poll(should_stop, interval_s=0.05)
    assert [poll() for _ in range(1000)] == [False] * 1000 and len(calls) == 1
    time.sleep(0.06)
    assert poll() and poll() and len(calls) == 2


def test_an_inner_check_also_asks_the_outer_one():
    outer, inner = threading.Event(), threading.Event()
    with cancellable(outer.is_set, interval_s=0), cancellable(inner.is_set, interval_s=0):
        assert not stop_requested()
        outer.set()
        assert stop_requested()
