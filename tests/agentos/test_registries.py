"""The one registry every app registers with: a name is taken once, a lookup that fails says what
is there, a test's item goes away with its `with` block."""

from __future__ import annotations

import pytest

from agentos.core.registries import Registry


def test_it_keeps_items_by_name_in_the_order_they_were_added() -> None:
    registry: Registry[int] = Registry("number")
    registry.add("two", 2)
    registry.add("one", 1)

    assert registry["two"] == 2
    assert registry.get("three") is None
    assert "one" in registry
    assert "three" not in registry
    assert registry.names() == ["two", "one"]
    assert registry.items() == [("two", 2), ("one", 1)]
    assert registry.values() == [2, 1]


def test_it_takes_the_same_item_again_and_refuses_another_under_a_taken_name() -> None:
    registry: Registry[str] = Registry("vault field")
    registry.add("missions.ProviderKey", "ciphertext")
    registry.add("missions.ProviderKey", "ciphertext")

    with pytest.raises(ValueError, match=r"A vault field named 'missions\.ProviderKey' is already"):
        registry.add("missions.ProviderKey", "secret")
    assert registry.items() == [("missions.ProviderKey", "ciphertext")]


def test_an_unknown_name_says_what_is_registered() -> None:
    registry: Registry[int] = Registry("program")
    registry.add("agent", 1)
    registry.add("chaos.noop", 2)

    with pytest.raises(
        KeyError, match=r"No program named 'gent' \(registered: agent, chaos.noop\)"
    ):
        registry["gent"]
    with pytest.raises(KeyError, match=r"registered: none"):
        Registry[int]("tool")["noop"]


def test_a_name_must_match_the_registry_s_pattern() -> None:
    registry: Registry[int] = Registry("bridge", name_pattern=r"[a-z][a-z0-9-]{0,30}")

    with pytest.raises(ValueError, match="'Git' is not a valid bridge name"):
        registry.add("Git", 1)
    assert registry.names() == []


def test_registered_adds_for_the_block_and_leaves_what_was_there() -> None:
    changes: list[str] = []
    registry: Registry[int] = Registry("hook", on_change=lambda: changes.append("changed"))
    registry.add("kept", 1)

    with registry.registered("temporary", 2), registry.registered("kept", 1):
        assert registry.names() == ["kept", "temporary"]
    with pytest.raises(RuntimeError), registry.registered("failing", 3):
        raise RuntimeError

    assert registry.names() == ["kept"]
    assert changes == ["changed"] * 5  # kept; temporary in and out; failing in and out


def test_remove_takes_an_item_out_and_refuses_an_unknown_name() -> None:
    registry: Registry[int] = Registry("tool")
    registry.add("noop", 1)

    assert registry.remove("noop") == 1
    assert len(registry) == 0
    with pytest.raises(KeyError, match="No tool named 'noop'"):
        registry.remove("noop")
