"""The reward client (`clients/reward`, `orchrm-reward`) in a trainer's own environment: a fresh venv with TRL at
another version than orchrm's pin (1.13.0 against 1.16.0; transformers as pip resolves it) gets the client installed
from this repository with no installed package changing version, and the guide's TRL example trains there for two
steps against a live `orchrm serve` (a subprocess of orchrm's own environment)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integrations.conftest import TOKEN

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "reward-for-trainers.md"
TRAINER_STACK = ["trl==1.13.0", "torch==2.13.0", "requests", "httpx==0.27.2"]  # trl 1.13 imports requests undeclared


def _freeze(python: Path) -> dict[str, str]:
    """Every installed distribution's version, by name (a path install included, which `pip freeze` gives as a URL)."""
    done = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True,
                          check=True)
    return {package["name"].lower(): package["version"] for package in json.loads(done.stdout)}


def _pip(python: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"}
    subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True, env=env, timeout=900)


def guide_trl_example(url: str) -> str:
    [code] = [block for block in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
              if block.startswith("# train_with_orchrm.py")]
    return code.replace("http://rm-host:8000", url)


@pytest.mark.slow  # about 3 min on 2 cores: 1 min to install the trainer's stack, the training, orchrm serve
def test_the_client_installs_beside_another_trl_and_the_guides_example_trains_there(orchrm_serve, tiny_policy,
                                                                                    tmp_path):
    venv = tmp_path / "trainer-env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    _pip(python, *TRAINER_STACK)
    before = _freeze(python)
    assert before["trl"] == "1.13.0"

    client = shutil.copytree(ROOT / "clients" / "reward", tmp_path / "reward-client")  # pip builds in it, not here
    _pip(python, str(client))
    after = _freeze(python)
    changed = {name: (before[name], after[name]) for name in before if after.get(name) != before[name]}
    assert changed == {}, f"installing the client changed {changed}"
    assert set(after) - set(before) == {"orchrm-reward"}
    leaks = subprocess.run([str(python), "-c", "import sys, orchrm_reward.trl, orchrm_reward.verl, "
                            "orchrm_reward.openrlhf; print(sorted(m for m in ('torch', 'transformers', 'trl', "
                            "'orchrm_dagster', 'dagster') if m in sys.modules))"],
                           capture_output=True, text=True, check=True)
    assert leaks.stdout.strip() == "[]"

    script = tmp_path / "train_with_orchrm.py"
    script.write_text(guide_trl_example(orchrm_serve))
    stats = f"{orchrm_serve}/v1/stats"
    scored_before = httpx.get(stats, headers={"Authorization": f"Bearer {TOKEN}"}).json()["items"]
    env = {**os.environ, "POLICY": tiny_policy, "USE_CPU": "1", "ORCHRM_SERVE_TOKEN": TOKEN, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": ""}
    done = subprocess.run([str(python), str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"trained 2 steps; mean reward per step: \[-?\d", done.stdout), done.stdout
    scored = httpx.get(stats, headers={"Authorization": f"Bearer {TOKEN}"}).json()["items"] - scored_before
    assert scored == 8  # 2 steps x 4 completions, each scored by the live service
    assert _freeze(python) == after  # training installed nothing either
