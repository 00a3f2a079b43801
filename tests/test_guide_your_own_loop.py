"""docs/guide/your-own-loop.md runs: every ```bash block of the page, in order, in an empty folder, with the orchrm
of this environment; then what the page promises is read back from the warehouse."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "your-own-loop.md"


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```$", text, flags=re.S | re.M)


def test_the_guide_has_its_steps_and_every_block_is_bash_or_shown_yaml():
    blocks = bash_blocks(GUIDE.read_text())
    assert len(blocks) >= 6
    assert any("orchrm loop" in block for block in blocks) and any("orchrm.yaml" in block for block in blocks)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a whole round and a first reward model on 2 cores: 600 s was passed under load
def test_the_guide_runs_from_an_empty_folder_to_a_gated_round(tmp_path):
    env = {key: value for key, value in os.environ.items()
           if key not in ("ORCHRM_STORAGE", "DAGSTER_HOME", "ORCHRM_CONFIG")}  # as a user's shell: the file decides
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for number, block in enumerate(bash_blocks(GUIDE.read_text()), 1):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"block {number} failed:\n{block}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        if "orchrm config show" in block:
            assert "loop.round.policy: \"acme-orchestrator\"  # orchrm.yaml:" in done.stdout, done.stdout

    from orchrm_dagster.storage import StorageRoot, Warehouse

    warehouse = Warehouse(StorageRoot(str(tmp_path / "storage")))
    sources = {row["label_source"]: row["n"] for row in warehouse.query(
        "select label_source, count(*) as n from labels group by 1").to_pylist()}
    assert sources == {"reference": 960, "run": 64}  # the live runs trusted by the file's labels section
    assert warehouse.query("select count(*) as n from rm_scores").to_pylist()[0]["n"] >= 1024
    [round_] = warehouse.query("select * from grpo_rounds").to_pylist()
    assert round_["start_policy"] == "acme-orchestrator" and round_["verdict"] in ("promoted", "rejected", "undecided")
    assert round_["heldout_plans_before"] == round_["heldout_plans_after"] == 16  # 8 problems x 2: the file's
    assert round_["heldout_accuracy_before"] is not None  # measured by executing plans, not by the reward
    [checkpoint] = warehouse.query("select * from policy_checkpoints").to_pylist()
    assert checkpoint["base_model"] == str(tmp_path / "my-orchestrator")
    assert checkpoint["prompt"] == str(tmp_path / "prompts" / "orchestrator.txt")  # outside the package
