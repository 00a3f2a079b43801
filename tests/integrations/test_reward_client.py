"""The reward client's distribution (`clients/reward`): httpx its one dependency, no import of orchrm, torch,
transformers or TRL at import time (torch only inside OpenRLHF's function, where OpenRLHF's own is there), `root=`
refused with where to find it, and orchrm's `integrations.trl` built on it."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "reward"
ALLOWED_AT_IMPORT = {"httpx", "orchrm_reward"}


def _top_level_imports(path: Path) -> set[str]:
    """The modules a file imports outside any function (what importing it loads)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_its_one_dependency_is_httpx():
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0].split("=")[0].split("<")[0] for d in project["dependencies"]] == ["httpx"]
    assert "optional-dependencies" not in project


@pytest.mark.parametrize("path", sorted((CLIENT / "orchrm_reward").glob("*.py")), ids=lambda p: p.name)
def test_its_modules_import_only_the_standard_library_and_httpx(path):
    outside = {m for m in _top_level_imports(path) - ALLOWED_AT_IMPORT if m not in sys.stdlib_module_names}
    assert outside == set(), f"{path.name} imports {outside} when imported"


def test_importing_it_loads_no_orchrm_torch_or_trainer():
    probe = ("import sys, orchrm_reward, orchrm_reward.openrlhf, orchrm_reward.verl; "
             "print(sorted(m for m in ('orchrm_dagster', 'dagster', 'torch', 'transformers', 'trl') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"


def test_root_needs_orchrm_and_says_where_it_is():
    from orchrm_reward import ChampionReward

    with pytest.raises(ValueError, match=r"root= .* needs the orchrm package .*orchrm_dagster\.integrations\.trl"):
        ChampionReward(root="/tmp/storage")


def test_orchrms_reward_functions_are_the_clients_with_root():
    import orchrm_reward

    from orchrm_dagster.integrations import trl

    assert issubclass(trl.ChampionReward, orchrm_reward.ChampionReward)
    assert issubclass(trl.AsyncChampionReward, orchrm_reward.AsyncChampionReward)
    assert trl.NoChampionError is orchrm_reward.NoChampionError
    assert trl.ChampionReward(root="/tmp/storage").root == "/tmp/storage"


def test_openrlhf_function_says_what_to_set(monkeypatch):
    from orchrm_reward.openrlhf import reward_func
    from orchrm_reward.trl import ChampionRewardError

    monkeypatch.delenv("ORCHRM_OPENRLHF_URL", raising=False)
    with pytest.raises(ChampionRewardError, match="set ORCHRM_OPENRLHF_URL"):
        reward_func(["q a"], ["q"], [None])
