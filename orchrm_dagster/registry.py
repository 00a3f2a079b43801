"""The one shape every extension point has: a registry of entries, keyed by name, open to code outside orchrm.

An entry comes from one of three places:

* a module of the registry's package, registering its entry when imported (the first read imports every module of
  the package, so a new entry is one new module);
* another installed distribution, through a Python entry point of the registry's group (`orchrm.rewards`...): the
  entry point's object is either the entry itself or a module that registers its entries when imported;
* a dotted import path given where a name is expected (`"my_pkg.my_module:my_reward"` or
  `"my_pkg.my_module.my_reward"`): `named` imports it and registers the entry it names (a module registering
  exactly one entry may be named too).

Configs keep the name as written (the dotted path included) and validate it with `name_type` / `names_type`, which
resolve it; a misspelled name is refused naming the known ones, and a dotted path that does not import says which
path and why.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import operator
import pkgutil
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator

Entry = TypeVar("Entry")


class Registry(Generic[Entry]):
    def __init__(self, what: str, package: str, group: str, skip: tuple[str, ...] = (),
                 key: Callable[[Any], str] = operator.attrgetter("name"), entry_type: type | None = None):
        self.what = what  # how errors name an entry, e.g. "evaluation method"
        self.package = package
        self.group = group  # the entry-point group other distributions register entries in
        self.skip = skip  # modules of the package that register nothing (shared helpers)
        self.key = key  # an entry's name (what configs call it)
        self.entry_type = entry_type  # what every entry is an instance of (None: `key` checks what an entry is)
        self._entries: dict[str, Entry] = {}
        self._paths: dict[str, Entry] = {}  # dotted paths already resolved, to their entries
        self._modules_imported = False
        self._entry_points_loaded = False
        self._loaded = False
        self._loading = threading.RLock()

    def register(self, entry: Entry) -> Entry:
        """Adds `entry` (what an entry's module does when imported)."""
        if self.entry_type is not None and not isinstance(entry, self.entry_type):
            raise TypeError(f"{_describe(entry)} is not a {self.entry_type.__name__}, which every {self.what} is")
        name = self.key(entry)
        if self._entries.get(name, entry) is not entry:
            raise ValueError(f"{self.what} {name!r} is registered already, by {_describe(self._entries[name])}")
        if not name.isidentifier():  # a settings section is named after it
            raise ValueError(f"{self.what} name {name!r} is not an identifier")
        self._entries[name] = entry
        return entry

    def all(self) -> dict[str, Entry]:
        """Every registered entry by name, sorted by name."""
        self._load()
        return dict(sorted(self._entries.items()))

    def names(self) -> tuple[str, ...]:
        return tuple(self.all())

    def named(self, name: str) -> Entry:
        """The entry `name`, or the one a dotted import path names (registered on first use); ValueError naming the
        known ones for an unknown name, or the path and the reason for a path that does not resolve."""
        self._load()
        entry = self._entries.get(name)  # looked up once per label: no copy of the registry here
        if entry is not None:
            return entry
        if _is_path(name):
            return self._resolved(name)
        raise ValueError(f"unknown {self.what} {name!r}; known: {', '.join(sorted(self._entries))} (or a dotted path "
                         f"to one: module:attribute)")

    def described(self) -> str:
        """Every entry's name and description, for a config field's or an option's help."""
        return "; ".join([f"{name}: {entry.description}" for name, entry in self.all().items()]
                         + ["or a dotted path to one (my_pkg.my_module:attribute)"])

    def settings_of(self, sections, entry: Entry):
        """`entry`'s own settings section in `sections` (a `sections_config` instance); an entry without a section
        there (one registered after the sections were made, as one named by a dotted path is) has its config's
        defaults."""
        section = getattr(sections, self.key(entry), None)
        return section if section is not None else entry.config()

    @property
    def name_type(self):
        """A config field's type: a name (or dotted path) this registry resolves; kept as written."""
        return Annotated[str, AfterValidator(self._validated)]

    @property
    def names_type(self):
        """A config field's type: a tuple of names (or dotted paths) this registry resolves; kept as written."""
        return Annotated[tuple[str, ...], AfterValidator(self._all_validated)]

    def _validated(self, name: str) -> str:
        self.named(name)
        return name

    def _all_validated(self, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            self.named(name)
        return names

    def _resolved(self, path: str) -> Entry:
        cached = self._paths.get(path)
        if cached is not None and self._entries.get(self.key(cached)) is cached:
            return cached
        before = set(self._entries)
        try:
            found = _import_object(path)
        except Exception as error:
            raise ValueError(f"{self.what} {path!r} does not import: {type(error).__name__}: {error}") from error
        if isinstance(found, ModuleType):
            entry = self._registered_by(found, before, path)
        else:
            try:
                entry = self._adopted(found)
            except (TypeError, AttributeError) as error:
                raise ValueError(f"{self.what} {path!r} names no {self.what}: {error}") from error
            except ValueError as error:  # its name taken, or not an identifier
                raise ValueError(f"{self.what} {path!r}: {error}") from error
        self._paths[path] = entry
        return entry

    def _registered_by(self, module: ModuleType, before: set[str], path: str) -> Entry:
        """The one entry `module` registered: on this import, else (imported before) the one its globals hold."""
        new = [self._entries[name] for name in self._entries if name not in before]
        held = new or list({id(value): value for value in vars(module).values()
                            if any(value is entry for entry in self._entries.values())}.values())
        if len(held) != 1:
            names = ", ".join(sorted(self.key(entry) for entry in held)) or "none"
            raise ValueError(f"{self.what} {path!r} is a module registering {len(held)} {self.what}s ({names}); "
                             f"name one as module:attribute")
        return held[0]

    def _adopted(self, entry: Entry) -> Entry:
        """`entry`, registered unless it is already (`register` refuses what is not an entry)."""
        if self.entry_type is None or isinstance(entry, self.entry_type):
            if self._entries.get(self.key(entry)) is entry:
                return entry
        return self.register(entry)

    def _load(self) -> None:
        """Imports the package's modules and loads the entry points, once, whichever thread reads first (the others
        wait for it); a module of the package reading the registry while it loads sees what is registered so far. A
        load that failed is tried again, and fails again, at the next read."""
        if self._loaded:
            return
        with self._loading:
            if not self._modules_imported:
                self._modules_imported = True
                try:
                    package = importlib.import_module(self.package)
                    for module in pkgutil.iter_modules(package.__path__):
                        if module.name not in self.skip:
                            importlib.import_module(f"{self.package}.{module.name}")
                except BaseException:
                    self._modules_imported = False
                    raise
            if not self._entry_points_loaded:
                self._entry_points_loaded = True
                try:
                    for point in importlib.metadata.entry_points(group=self.group):
                        self._load_entry_point(point)
                except BaseException:
                    self._entry_points_loaded = False
                    raise
                self._loaded = True

    def _load_entry_point(self, point: importlib.metadata.EntryPoint) -> None:
        where = f"{self.what} entry point {point.name!r} = {point.value!r} (group {self.group}"
        where += f", distribution {point.dist.name})" if point.dist is not None else ")"
        try:
            found = point.load()
        except Exception as error:
            raise ValueError(f"{where} does not load: {type(error).__name__}: {error}") from error
        if not isinstance(found, ModuleType):  # a module registers its entries when imported
            try:
                self._adopted(found)
            except (TypeError, AttributeError) as error:
                raise ValueError(f"{where} names no {self.what}: {error}") from error
            except ValueError as error:  # a name taken, or not an identifier
                raise ValueError(f"{where}: {error}") from error


def _is_path(name: str) -> bool:
    return "." in name or ":" in name


def _import_object(path: str):
    """What `path` names: `module:attribute[.attribute...]`, or `package.module.attribute` (TRL's form for a reward
    function), or `package.module`."""
    if ":" in path:
        module_name, _, attributes = path.partition(":")
        found = importlib.import_module(module_name)
        for attribute in attributes.split("."):
            found = getattr(found, attribute)
        return found
    module_name, _, attribute = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        module = None
    if module is not None and hasattr(module, attribute):
        return getattr(module, attribute)
    try:
        return importlib.import_module(path)  # the whole path names a module
    except ModuleNotFoundError as error:
        if error.name != path or module is None:
            raise
        raise AttributeError(f"module {module_name!r} has no attribute {attribute!r}") from None


def _describe(entry) -> str:
    if isinstance(entry, type):
        return entry.__name__
    name = getattr(entry, "name", None)
    return f"{type(entry).__name__} {name!r}" if isinstance(name, str) else type(entry).__name__
