"""The layers point one way: a test over every import statement of the project (AST, no imports run).

app -> definitions -> assets -> engine:
- `orchrm_dagster/app/` (the CLI, its commands, the main job, `orchrm loop`, the instance) stands on top; it may
  import anything below it.
- `orchrm_dagster/definitions.py` only assembles what `assets/` defines; it never imports the app.
- `assets/` is the whole Dagster layer (assets, checks, jobs, sensors, resources, partitions, run configs, the loop's
  run requests); it never imports the app or definitions.py, and reaches the engine through unit roots.
- The engine (the rest of `orchrm_dagster`) imports none of them, nor Dagster.
- A unit imports another unit only through its root (`from orchrm_dagster.llm import X`), never its internals.
- A unit imports only the units it is allowed to (below it): the map below is the architecture, written down.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orchrm_dagster"

FOUNDATION = {"contract", "engine_config", "settings_file", "devices", "reporting", "registry", "training_logs", "lora", "processes",
              "trainer_checkpoints", "trainer_args", "faults"}
ALLOWED: dict[str, set[str]] = {
    "contract": set(),
    "engine_config": set(),
    "devices": set(),
    "reporting": set(),
    "registry": set(),
    "lora": {"faults"},
    "processes": set(),
    "faults": set(),  # the points where fault tests kill a process
    "spending": {"storage"},  # each attempt's tokens, journaled as they are spent
    "training_logs": {"engine_config"},
    "trainer_checkpoints": {"engine_config", "lora", "faults"},
    "trainer_args": set(),
    "settings_file": set(),
    "storage": {"contract", "engine_config", "trainer_checkpoints", "settings_file", "faults"},  # the store's model folder is
    # the trainers'; its root may be the settings file's

    "plans": set(),
    "llm": {"engine_config", "devices", "registry"},
    "labels": {"contract", "engine_config", "storage", "registry"},
    "problems": {"contract", "engine_config", "storage", "labels"},
    "traces": {"contract", "engine_config", "storage"},  # traces (OTel GenAI, Langfuse, LangSmith) <-> run records;
    # the imported runs' labels and scores read from the storage root and sent back to their tools (score_export)
    "ingest": {"contract", "engine_config", "storage", "processes", "traces"},  # its workers die with their owner;
    # a landed trace file is read through traces
    "pairs": {"contract", "engine_config", "storage"},
    "mas": {"contract", "engine_config", "llm", "plans", "labels"},
    "truths": {"engine_config", "plans", "registry"},
    "synthetic": {"contract", "plans", "problems", "labels", "truths"},
    "environments": {"contract", "engine_config", "llm", "mas", "plans", "labels", "registry", "truths", "synthetic"},
    "rm": {"contract", "engine_config", "devices", "storage", "labels", "pairs", "plans", "problems", "synthetic",
           "training_logs", "lora", "processes", "trainer_checkpoints", "trainer_args", "reporting", "settings_file"},
    # settings_file: a benchmark's domain follows the file's labels.answer_types, as its labels do
    "orchestration": {"contract", "engine_config", "storage", "llm", "mas", "plans", "problems", "rm", "environments",
                      "faults"},
    "evaluation": {"contract", "engine_config", "storage", "llm", "mas", "rm", "devices", "reporting", "registry",
                   "environments"},
    "grpo": {"contract", "engine_config", "devices", "storage", "llm", "mas", "plans", "labels", "pairs", "rm",
             "orchestration", "evaluation", "reporting", "registry", "training_logs", "environments", "lora",
             "processes", "trainer_checkpoints", "trainer_args", "faults", "spending"},
    "loop": {"engine_config", "storage", "orchestration", "pairs", "rm", "grpo", "spending"},
    "serving": {"storage", "rm", "engine_config"},
    "integrations": {"storage", "rm"},  # the champion as a reward for other trainers (TRL): over HTTP or in process
    "settings": {"engine_config", "settings_file", "storage", "llm", "orchestration", "mas", "problems", "ingest",
                 "labels", "pairs", "rm", "evaluation", "loop", "serving"},  # the settings file's sections
    "training_jobs": {"engine_config", "storage", "rm", "grpo", "llm", "orchestration"},
}
EVERYWHERE = {"lazy_names"}  # what any unit may import: a package root's lazy names (no import of its own)
ABOVE = {"app", "definitions"}  # units of orchrm_dagster above the engine (definitions: definitions.py)
DAGSTER_MODULES = ("dagster", "dagster_k8s", "dagster_postgres")


def _unit(path: Path, package: Path = PACKAGE) -> str:
    return path.relative_to(package).with_suffix("").parts[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in the file, function-level ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _engine_files(package: Path = PACKAGE) -> list[Path]:
    return [p for p in sorted(package.rglob("*.py")) if p != package / "__init__.py"]


def _above(module: str) -> str | None:
    """`app` or `definitions` when the module is (in) orchrm_dagster.app or orchrm_dagster.definitions."""
    parts = module.split(".")
    return parts[1] if parts[0] == "orchrm_dagster" and len(parts) > 1 and parts[1] in ABOVE else None


def violations(root: Path = ROOT) -> list[str]:
    """Every import against the layers, in the project at `root` (its orchrm_dagster/ and assets/)."""
    package = root / "orchrm_dagster"
    problems = []
    for path in _engine_files(package):
        unit = _unit(path, package)
        where = path.relative_to(root)
        for line, module in _imports(path):
            top = module.split(".")[0]
            if unit not in ABOVE and top in (*DAGSTER_MODULES, "assets"):
                problems.append(f"{where}:{line}: the engine imports {module} (only assets/, definitions.py and "
                                "orchrm_dagster/app/ may)")
            if unit not in ABOVE and _above(module):
                problems.append(f"{where}:{line}: the engine imports {module} (it stands above the engine)")
            if unit == "definitions" and _above(module) == "app":
                problems.append(f"{where}:{line}: definitions.py imports {module} (the app stands above it)")
            if top != "orchrm_dagster":
                continue
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 else None
            if target is None or target == unit or unit in ABOVE or target in ABOVE:
                continue
            if len(parts) > 2:
                problems.append(f"{where}:{line}: {module} is an internal of {target}; import from "
                                f"orchrm_dagster.{target}")
            if target not in ALLOWED.get(unit, set()) | EVERYWHERE:
                problems.append(f"{where}:{line}: {unit} may not import {target} (allowed: "
                                f"{', '.join(sorted(ALLOWED.get(unit, set()))) or 'nothing'})")
    for path in sorted((root / "assets").rglob("*.py")):
        where = path.relative_to(root)
        for line, module in _imports(path):
            if _above(module):
                problems.append(f"{where}:{line}: assets/ imports {module} (it stands above the Dagster layer)")
    return problems


def test_every_engine_unit_is_placed_in_the_layer_map():
    units = {_unit(p) for p in _engine_files()} - ABOVE - {"data"} - EVERYWHERE
    assert units == set(ALLOWED), "add new units to ALLOWED with the units they may import"


def test_layers_point_one_way():
    assert violations() == []


def test_the_layer_map_has_no_cycle():
    visiting, done = set(), set()

    def visit(unit):
        assert unit not in visiting, f"cycle through {unit}"
        if unit in done:
            return
        visiting.add(unit)
        for lower in ALLOWED[unit]:
            visit(lower)
        visiting.discard(unit)
        done.add(unit)

    for unit in ALLOWED:
        visit(unit)


def test_assets_reach_the_engine_through_unit_roots():
    problems = []
    for path in sorted((ROOT / "assets").rglob("*.py")):
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[0] == "orchrm_dagster" and len(parts) > 2 and parts[1] not in ABOVE:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert problems == []


@pytest.mark.parametrize("where, bad, message", [
    ("assets/probe.py", "from orchrm_dagster.app.commands import ingest_files",
     "assets/ imports orchrm_dagster.app.commands"),
    ("assets/probe.py", "import orchrm_dagster.definitions", "assets/ imports orchrm_dagster.definitions"),
    ("orchrm_dagster/definitions.py", "from orchrm_dagster.app.cli import main",
     "definitions.py imports orchrm_dagster.app.cli"),
    ("orchrm_dagster/pairs/probe.py", "from assets.sensors import loop_sensor", "the engine imports assets.sensors"),
    ("orchrm_dagster/pairs/probe.py", "from orchrm_dagster.app.instance import cli_instance",
     "the engine imports orchrm_dagster.app.instance"),
])
def test_nothing_imports_what_stands_above_it(tmp_path, where, bad, message):
    probe = tmp_path / where
    probe.parent.mkdir(parents=True)
    probe.write_text(bad + "\n")
    [found] = violations(tmp_path)
    assert message in found and f"{where}:1" in found


@pytest.mark.parametrize("bad, message", [
    ("from orchrm_dagster.storage.root import StorageRoot", "internal of storage"),
    ("import dagster", "the engine imports dagster"),
    ("from orchrm_dagster.rm import RewardScorer", "may not import rm"),
])
def test_the_check_catches_each_kind_of_violation(tmp_path, bad, message):
    probe = tmp_path / "orchrm_dagster" / "pairs" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(bad + "\n")
    [found] = violations(tmp_path)
    assert message in found and "pairs/probe.py:1" in found
