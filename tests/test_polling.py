"""The tests' one polling helper."""

import itertools

import pytest

from tests.polling import wait_for


def test_it_returns_the_first_truthy_value() -> None:
    answers = iter([None, 0, "", "found"])

    assert wait_for(lambda: next(answers), timeout=5, message="an answer", interval=0) == "found"


def test_it_fails_saying_what_it_awaited_and_for_how_long() -> None:
    asked = itertools.count()

    with pytest.raises(pytest.fail.Exception, match=r"waited 0\.\d s \(timeout 0\.1 s\) for a run"):
        wait_for(lambda: next(asked) < 0, timeout=0.1, message="a run", interval=0.01)
    assert next(asked) > 2  # it kept asking until the deadline
