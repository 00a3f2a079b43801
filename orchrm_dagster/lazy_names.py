"""Package roots whose names load lazily (PEP 562 module `__getattr__`): importing a root imports none of its modules;
a name imports the module that defines it when first used. So a command that only reads settings or the warehouse
does not pay for the modules that import torch, transformers or TRL (tests/structure/test_cli_imports.py).

A name that is also the name of one of the package's modules (`loop.decide`) cannot be lazy: once that module is
imported, Python sets it as the package's attribute, and the lazy name is never asked for. Such a name is imported
eagerly by its root; tests/structure/test_lazy_roots.py holds every root to that."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping


def lazy_names(package: str, exports: Mapping[str, str], eager: Collection[str] = ()
               ) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """`__getattr__`, `__dir__` and `__all__` for the root of `package`: `exports` maps each lazy name to the module
    of the package that defines it; `eager` names the root imports itself (they join `__all__`)."""
    names = sorted({*exports, *eager})

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names
