"""Named registries: how an app plugs into a layer below it (docs/design.md §2).

A lower layer declares a `Registry` (the kernel's programs, the tools, the scrubber's secret
sources, the vault's fields, the egress policy and bridges, the loop's stop hooks); each app adds
its items from its `AppConfig.ready()`, never at import time, so what is registered depends on
the installed apps only, not on which modules happen to have been imported.

A name is taken once: adding the same item again is a no-op (a `ready()` may run twice, a test
module may be imported by several others), adding a different one is refused. Tests that need an
item for a while use `registered(name, item)`, which puts the registry back as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Registry[T]:
    """Items by name, in the order they were added. `kind` names an item in error messages;
    `name_pattern` (a regex the whole name must match) for names that end up somewhere else
    (a host name...); `on_change` is called after every addition and removal."""

    def __init__(
        self,
        kind: str,
        *,
        name_pattern: str | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.kind = kind
        self._pattern = re.compile(name_pattern) if name_pattern is not None else None
        self._on_change = on_change
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> None:
        if self._pattern is not None and not self._pattern.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid {self.kind} name ({self._pattern.pattern}).")
        if name in self._items:
            if self._items[name] != item:
                raise ValueError(
                    f"A {self.kind} named {name!r} is already registered: "
                    f"{self._items[name]!r}, not {item!r}."
                )
            return
        self._items[name] = item
        self._changed()

    def remove(self, name: str) -> T:
        item = self[name]
        del self._items[name]
        self._changed()
        return item

    @contextmanager
    def registered(self, name: str, item: T) -> Iterator[T]:
        """`item` under `name` for the `with` block (for tests); one already there stays."""
        there = name in self._items
        self.add(name, item)
        try:
            yield item
        finally:
            if not there:
                self.remove(name)

    def get(self, name: str) -> T | None:
        return self._items.get(name)

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise KeyError(f"No {self.kind} named {name!r} (registered: {known}).") from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> list[str]:
        return list(self._items)

    def values(self) -> list[T]:
        return list(self._items.values())

    def items(self) -> list[tuple[str, T]]:
        return list(self._items.items())

    def __repr__(self) -> str:
        return f"<Registry of {self.kind}s: {', '.join(self._items) or 'empty'}>"

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()
