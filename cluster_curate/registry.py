"""Registries of the extension points (docs/architecture.md, "Extension points"): feature kinds,
in-cluster orders, allocations, input formats. A new one is a function or class plus one `register` line;
its CLI choice and help text follow from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from cluster_curate.errors import CurateError


def lazy(module: str, name: str) -> Callable[[], Any]:
    """A callable returning `module.name` when called: a registry entry or an option's choices that live in
    another module, read without importing it when the entry or the declaration is made."""
    def get():
        import importlib
        value = importlib.import_module(module)
        for part in name.split("."):  # "ProxyOptions.size": a class attribute
            value = getattr(value, part)
        return value
    return get


@dataclass
class Entry:
    name: str
    help: str
    value: Any = None
    attrs: dict = field(default_factory=dict)

    def __getattr__(self, item):
        try:
            return self.__dict__["attrs"][item]
        except KeyError:
            raise AttributeError(item) from None


class Registry:
    """Named entries in registration order. `option` is the CLI option the names are chosen with (errors
    and help name it)."""

    def __init__(self, option: str):
        self.option = option
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, help: str, value: Any = None, **attrs) -> Any:
        """Add (or replace) the entry `name`: its help text, its value (a function, a class, a column name)
        and any attributes the caller reads (`needs=...`). Returns the value unchanged."""
        self._entries[name] = Entry(name, help, value, attrs)
        return value

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def get(self, name: str) -> Entry:
        if name not in self._entries:
            raise CurateError(f"{self.option} must be one of {', '.join(self._entries)}, got {name!r}")
        return self._entries[name]

    def help_text(self) -> str:
        """'a: what a does; b: what b does' for an option's --help."""
        return "; ".join(f"{e.name}: {e.help}" for e in self._entries.values())
