"""The reward files docs/guide/reward-for-trainers.md gives OpenRLHF (behind a token) and verl, loaded by path as those
trainers load them and called as they call them, against a live service: the champion's /v1/score scores."""

import asyncio
import importlib.util
import re
from pathlib import Path

import httpx
import pytest

from orchrm_dagster.serving import create_app
from tests.serving.conftest import TEST_SETTINGS, running

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "reward-for-trainers.md"
QUESTION = "How many apples are left if 12 of 40 are eaten?"
PLANS = ["<agent_name>CoTAgent</agent_name>", "another plan"]


def guide_file(name: str, folder: Path, url: str):
    """The guide's Python block that starts with `# name`, the service's URL in place of rm-host's, loaded by path."""
    [code] = [block for block in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
              if block.startswith(f"# {name}\n")]
    path = folder / name
    path.write_text(code.replace("http://rm-host:8000", url))
    spec = importlib.util.spec_from_file_location("reward_func", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_openrlhf_file_sends_the_token(math_root, tmp_path, monkeypatch):
    with running(create_app(math_root, TEST_SETTINGS, token="right-token")) as url:
        monkeypatch.setenv("ORCHRM_OPENRLHF_URL", f"{url}/v1/openrlhf/get_reward?domain=math")
        monkeypatch.setenv("ORCHRM_SERVE_TOKEN", "right-token")
        module = guide_file("orchrm_openrlhf.py", tmp_path, url)
        got = module.reward_func([QUESTION + p for p in PLANS], [QUESTION] * 2, ["28", "28"])
        expected = httpx.post(f"{url}/v1/score", json={"question": QUESTION, "plans": PLANS, "domain": "math"},
                              headers={"Authorization": "Bearer right-token"}).json()["scores"]
        assert got["rewards"].tolist() == pytest.approx(expected, abs=1e-5)
        monkeypatch.setenv("ORCHRM_SERVE_TOKEN", "wrong")
        with pytest.raises(RuntimeError, match="refused to score \\(401\\): wrong bearer token"):
            module.reward_func([QUESTION + PLANS[0]], [QUESTION], ["28"])


def test_the_verl_file_scores_each_sample(math_service, tmp_path):
    module = guide_file("orchrm_verl.py", tmp_path, math_service)
    score = asyncio.run(module.compute_score("openai/gsm8k", PLANS[0], "28", extra_info={"question": QUESTION}))
    expected = httpx.post(f"{math_service}/v1/score", json={"question": QUESTION, "plans": PLANS[:1],
                                                            "domain": "math"}).json()["scores"]
    assert score == pytest.approx(expected[0], abs=1e-5)
