"""The scrubber on what the journal stores: a result is scanned as one JSON document when that
finds whatever a walk over its strings would, and walked otherwise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from agentos.core import scrubber

pytestmark = pytest.mark.django_db  # the registered sources may read the database

PLAIN = "plain-known-value-4471"
QUOTED = 'pass"word\\with-escapes-9'  # JSON writes it differently: the scan cannot see it
ACCENTED = "mot-de-passé-7781"  # escaped as \u00e9 in JSON
SHAPED = "sk-ant-api03-" + "A" * 24


@pytest.fixture
def known() -> Iterator[list[str]]:
    values = [PLAIN]

    def source() -> list[str]:
        return values

    with scrubber.SECRET_SOURCES.registered("test values", source):
        yield values


def test_it_returns_a_clean_result_as_the_same_object_and_its_json(known: list[str]) -> None:
    result = {"output": "all fine", "items": [{"n": 1, "text": "héllo"}], "ok": True}

    assert scrubber.scrub_value(result) is result
    assert json.loads(scrubber.scrub_json(result)) == result


def test_it_finds_known_values_and_shapes_in_keys_values_and_lists(known: list[str]) -> None:
    result = {
        "output": f"token {PLAIN} printed",
        "nested": [{"deep": ["x", SHAPED]}],
        PLAIN: "a key",
        "fine": "untouched",
    }

    scrubbed = scrubber.scrub_value(result)

    assert scrubbed == {
        "output": f"token {scrubber.MARK} printed",
        "nested": [{"deep": ["x", scrubber.MARK]}],
        scrubber.MARK: "a key",
        "fine": "untouched",
    }
    assert json.loads(scrubber.scrub_json(result)) == scrubbed


@pytest.mark.parametrize("value", [QUOTED, ACCENTED])
def test_it_walks_when_a_known_value_reads_differently_in_json(
    known: list[str], value: str
) -> None:
    known.append(value)
    scrubber.forget()
    result = {"output": [f"before {value} after"]}

    assert scrubber.scrub_value(result) == {"output": [f"before {scrubber.MARK} after"]}
    assert json.loads(scrubber.scrub_json(result)) == {"output": [f"before {scrubber.MARK} after"]}


def test_it_keeps_opaque_values_and_what_is_not_json(known: list[str]) -> None:
    signed = {"signature": SHAPED, "text": PLAIN}
    assert scrubber.scrub_value(signed, opaque=frozenset({"signature"})) == {
        "signature": SHAPED,
        "text": scrubber.MARK,
    }
    odd = {"at": datetime(2026, 1, 1, tzinfo=UTC), "text": "clean"}
    assert scrubber.scrub_value(odd) is odd
    with pytest.raises(TypeError):
        scrubber.scrub_json(odd)
