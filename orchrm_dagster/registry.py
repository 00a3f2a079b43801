"""The one shape every extension point has: a registry filled by the modules of a package, each registering its
entry when imported. The first read imports every module of the package, so a new entry is one new module."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    name: str


Entry = TypeVar("Entry", bound=Named)


class Registry(Generic[Entry]):
    def __init__(self, what: str, package: str, skip: tuple[str, ...] = ()):
        self.what = what  # how errors name an entry, e.g. "evaluation method"
        self.package = package
        self.skip = skip  # modules of the package that register nothing (shared helpers)
        self._entries: dict[str, Entry] = {}
        self._imported = False

    def register(self, entry: Entry) -> Entry:
        """Adds `entry` (what an entry's module does when imported)."""
        if self._entries.get(entry.name, entry) is not entry:
            raise ValueError(f"two {self.what}s are named {entry.name!r}")
        if not entry.name.isidentifier():
            raise ValueError(f"{self.what} name {entry.name!r} is not an identifier")
        self._entries[entry.name] = entry
        return entry

    def all(self) -> dict[str, Entry]:
        """Every registered entry by name, sorted by name."""
        self._import_modules()
        return dict(sorted(self._entries.items()))

    def names(self) -> tuple[str, ...]:
        return tuple(self.all())

    def named(self, name: str) -> Entry:
        """The entry `name`; ValueError naming it and the known ones otherwise."""
        entries = self.all()
        if name not in entries:
            raise ValueError(f"unknown {self.what} {name!r}; known: {', '.join(entries)}")
        return entries[name]

    def _import_modules(self) -> None:
        if self._imported:
            return
        self._imported = True
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            if module.name not in self.skip:
                importlib.import_module(f"{self.package}.{module.name}")
