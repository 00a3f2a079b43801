"""The package roots whose names load lazily (`orchrm_dagster.lazy_names`): every name resolves to what its module
defines, and none is also the name of one of the package's modules (the module, once imported, would take the
name's place on the package: `from orchrm_dagster.loop import decide` gave the module, not the function)."""

import importlib
import pkgutil

import pytest

LAZY_ROOTS = ("evaluation", "grpo", "llm", "loop", "mas", "orchestration", "rm", "serving")


@pytest.mark.parametrize("unit", LAZY_ROOTS)
def test_every_lazy_name_resolves_and_none_is_a_module_name(unit):
    root = importlib.import_module(f"orchrm_dagster.{unit}")
    modules = {module.name for module in pkgutil.iter_modules(root.__path__)}
    exports = root._EXPORTS
    assert not set(exports) & modules, f"import these eagerly in the root: {sorted(set(exports) & modules)}"
    for name, module in exports.items():
        defining = importlib.import_module(f"orchrm_dagster.{unit}.{module}")
        assert getattr(root, name) is getattr(defining, name), name
    assert sorted(root.__all__) == sorted(dir(root)) and set(exports) <= set(root.__all__)
    for name in root.__all__:
        assert not isinstance(getattr(root, name), type(pkgutil)), f"{unit}.{name} is a module"
