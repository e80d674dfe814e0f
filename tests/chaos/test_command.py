"""`manage.py chaos`: its arguments (the runs are the quick matrix's and `make chaos`'s)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


def test_it_refuses_a_case_it_does_not_know_and_names_the_ones_it_does() -> None:
    with pytest.raises(CommandError) as refused:
        call_command("chaos", "--case", "node_runner_case", "--case", "no_such_case")
    assert str(refused.value) == (
        "No chaos case named no_such_case: the cases are shell_append_case, fork_case,"
        " engine_bump_case, node_runner_case, supervisor_case."
    )
