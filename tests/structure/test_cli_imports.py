"""`orchrm query`, `orchrm status` and `orchrm config` are run dozens of times a day: on an empty root `query` and
`status` import neither Dagster nor torch nor transformers; on a root with batches, a champion and rounds, `status`
(which reads the instance) and `config show|check` import no torch, transformers or TRL, nor does loading the code
location (`dg list defs`). Checked in a fresh interpreter."""

import json
import subprocess
import sys

HEAVY = ("dagster", "torch", "transformers", "polars", "sklearn")

_PROBE = """
import json, sys
from click.testing import CliRunner
from orchrm_dagster.app.cli import main
loaded_by_import = [m for m in {heavy!r} if m in sys.modules]
results = [CliRunner().invoke(main, ["--storage", {root!r}, *args]) for args in {commands!r}]
print(json.dumps({{"import": loaded_by_import, "loaded": [m for m in {heavy!r} if m in sys.modules],
                   "outputs": [r.output for r in results], "codes": [r.exit_code for r in results]}}))
"""


def _probe(root, commands) -> dict:
    code = _PROBE.format(heavy=HEAVY, root=str(root), commands=commands)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_query_and_status_import_no_dagster_torch_or_transformers(tmp_path):
    from orchrm_dagster.storage import StorageRoot, Warehouse

    Warehouse(StorageRoot(str(tmp_path))).refresh_views()
    found = _probe(tmp_path, [["query", "--format", "csv", "select count(*) n from runs"], ["status"]])
    assert found["codes"] == [0, 0], found["outputs"]
    assert found["outputs"][0] == "n\n0\n"
    assert found["import"] == [] and found["loaded"] == []


def test_csv_lines_end_with_lf_so_tail_gets_the_bare_value(tmp_path):
    from orchrm_dagster.storage import StorageRoot, Warehouse

    Warehouse(StorageRoot(str(tmp_path))).refresh_views()
    command = (f"{sys.executable} -m orchrm_dagster.app.cli --storage {tmp_path} query --format csv "
               f"\"select 'a' k, 41 + 1 answer union all select 'b', 3 order by 1\" | tail -n 1")
    done = subprocess.run(["bash", "-c", command], capture_output=True, timeout=120, check=True)
    assert done.stdout == b"b,3\n"


MODELS = ("torch", "transformers", "trl")  # what a command that reads must not pay for (seconds each)
_MODEL_PROBE = """
import json, sys
from click.testing import CliRunner
from orchrm_dagster.app.cli import main
result = CliRunner().invoke(main, {args!r})
print(json.dumps({{"loaded": [m for m in {models!r} if m in sys.modules], "output": result.output,
                   "code": result.exit_code}}))
"""


def _probe_models(args: list[str]) -> dict:
    code = _MODEL_PROBE.format(args=args, models=MODELS)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_status_and_config_on_a_root_with_batches_a_champion_and_rounds_import_no_model_code(isolated_env):
    """The root `make run` leaves has batches, a champion and rounds: `status` asks the loop what it would do there,
    `config show` and `check` read every section of the settings, and none of them loads torch, transformers or TRL
    (measured: `orchrm status` 6.2 s -> 2.6 s on that root; docs/benchmarks.md)."""
    from orchrm_dagster.loop import LoopSettings
    from orchrm_dagster.storage import StorageRoot
    from orchrm_dagster.synthetic import EXAMPLE_BATCH
    from tests.loop_roots import round_row, write_reward_model, write_rounds, write_scores

    root = StorageRoot(str(isolated_env / "storage"))
    subprocess.run([sys.executable, "-m", "orchrm_dagster.app.cli", "ingest", str(EXAMPLE_BATCH)], check=True,
                   capture_output=True, timeout=300)
    write_reward_model(root, 1, right=30, validation_pairs={"math": 30},
                       config=LoopSettings().reward_model_config())
    write_scores(root, 1)
    write_rounds(root, [round_row(1, promoted=False, verdict="undecided", reason="the interval reaches 0")])

    status = _probe_models(["status"])
    assert status["code"] == 0, status["output"]
    assert "round 1: undecided: the interval reaches 0" in status["output"] and "v1" in status["output"]
    assert status["loaded"] == []
    for args in (["config", "show"], ["config", "check"]):
        found = _probe_models(args)
        assert found["code"] == 0 and found["loaded"] == [], (args, found)


def test_the_code_location_loads_without_model_code():
    """What `dg list defs`, `dg check defs` and the UI's code server load: the Definitions, with no torch,
    transformers or TRL until a step needs them."""
    code = ("import json, sys; from orchrm_dagster.definitions import defs; defs.resolve_all_asset_specs(); "
            f"print(json.dumps([m for m in {MODELS!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
