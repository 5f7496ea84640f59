"""The tests' timing budget (tests/support/timing.py) and wait_for's defaults taken from it."""

from __future__ import annotations

import importlib
import inspect
import time

import pytest

from tests.support import timing
from tests.support.timing import INTERVAL, STALL, WAIT, quiet_for, stalls, ttl_outlasting
from tests.support.waiting import wait_for


@pytest.fixture
def reloaded_timing(monkeypatch):
    """timing.py read again under the environment the test sets; as it was afterwards."""

    def load(ci: str | None):
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        return importlib.reload(timing)

    yield load
    monkeypatch.undo()
    importlib.reload(timing)


def test_ci_widens_the_stall_and_the_default_wait_and_nothing_else(reloaded_timing):
    def budget(ci: str | None) -> tuple[bool, float, float, float]:
        module = reloaded_timing(ci)
        return module.CI, module.STALL, module.WAIT, module.INTERVAL

    here, stall, wait, interval = budget(None)
    assert not here
    assert budget("true") == (True, 2 * stall, 2 * wait, interval)
    assert budget("TRUE") == (True, 2 * stall, 2 * wait, interval)
    assert budget("false") == (False, stall, wait, interval)


def test_a_stall_is_seconds_long_and_the_default_wait_outlasts_many_of_them():
    assert STALL >= 1.0  # 0.3 s was seen too little for a stall between two calls
    assert WAIT >= 10 * STALL
    assert 0 < INTERVAL < STALL


@pytest.mark.parametrize("count", [1, 3, 10])
def test_room_for_stalls_and_a_ttl_outlasting_calls_grow_with_their_count(count):
    assert stalls(count) == count * STALL
    assert ttl_outlasting(count) == count * STALL
    assert ttl_outlasting(count + 1) > ttl_outlasting(count)
    assert ttl_outlasting() >= 3 * STALL  # the default: a few calls


def test_quiet_for_lets_the_time_pass_while_the_condition_stays_false():
    looked = []

    def condition() -> bool:
        looked.append(time.monotonic())
        return False

    started = time.monotonic()
    quiet_for(0.3, condition, "something")
    assert time.monotonic() - started >= 0.3
    assert len(looked) >= 2
    assert looked[-1] - started >= 0.3  # a last look at the end


def test_quiet_for_fails_as_soon_as_the_condition_holds_naming_what_and_the_value():
    calls = iter([0, 0, "the lease passed around twice"])
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"a second leader within 30 s: 'the lease passed"):
        quiet_for(30, lambda: next(calls), "a second leader", interval=0.01)
    assert time.monotonic() - started < 5


def test_wait_for_takes_its_deadline_and_its_pace_from_the_budget_when_none_is_given():
    parameters = inspect.signature(wait_for).parameters
    assert parameters["timeout"].default == WAIT
    assert parameters["interval"].default == INTERVAL


def test_wait_for_returns_what_the_predicate_found_with_or_without_a_deadline():
    values = iter([None, 0, "found"])
    assert wait_for(lambda: next(values), what="a value", interval=0.001) == "found"
    assert wait_for(lambda: 42, 1, "a number") == 42


def test_wait_for_must_be_told_what_it_waits_for():
    with pytest.raises(TypeError, match="say what is awaited"):
        wait_for(lambda: True)  # type: ignore[call-overload]
