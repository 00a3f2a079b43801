"""`orchrm query` and `orchrm status` are run dozens of times a day: they read the warehouse and the storage root and
import neither Dagster nor torch nor transformers (the Definitions, the models). Checked in a fresh interpreter."""

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
