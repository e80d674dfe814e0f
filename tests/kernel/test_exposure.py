"""The rule of two's flags: recorded per run by the step that set them, read per tree."""

import pytest

from kernel import exposure, runs
from kernel.exposure import OUTWARD, PRIVATE, UNTRUSTED
from tests.kernel.factories import make_account

pytestmark = pytest.mark.django_db


def test_a_flag_keeps_the_first_step_that_set_it_and_the_tree_shares_them() -> None:
    account = make_account()
    root = runs.start_run(account=account, program="chaos.noop")
    child = runs.spawn_child(parent=root, seq=3, program="chaos.noop", input={}, caps={})
    assert exposure.of_tree(root.pk).flags == {}
    exposure.mark(child.pk, {UNTRUSTED}, seq=4, by="web_fetch")
    exposure.mark(child.pk, {UNTRUSTED}, seq=9, by="web_fetch")  # replayed or later: kept first
    exposure.mark(root.pk, {PRIVATE}, seq=5, by="bridge github")
    tree = exposure.of_tree(root.pk)
    assert tree.flags[UNTRUSTED] == {"run": child.pk, "seq": 4, "by": "web_fetch"}
    assert exposure.of_tree(child.pk).flags == tree.flags  # the child sees its parent's flags
    assert tree.would_complete({OUTWARD})
    assert not tree.would_complete(set())
    assert not exposure.Exposure({UNTRUSTED: {}}).would_complete({OUTWARD})
    assert tree.describe()[0].startswith("read untrusted content: step 4 of run")


def test_an_unknown_flag_is_refused() -> None:
    account = make_account()
    run = runs.start_run(account=account, program="chaos.noop")
    with pytest.raises(ValueError, match="Unknown rule-of-two flag"):
        exposure.mark(run.pk, {"everything"}, seq=1, by="x")
