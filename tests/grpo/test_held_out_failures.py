"""A held-out measure that failed is no measurement: plans whose decoding raised are counted per side, the round is
unverified with the cause (never promoted or rejected on them), and the failed side is never reused. The failure comes
from a backend registered as any team's would be (the registry), which fails like a GPU out of memory for the model
folders it is told to."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.grpo import read_table, run_round
from orchrm_dagster.grpo.gate import UNVERIFIED
from orchrm_dagster.llm import Completion, TransformersSpec, register_backend
from orchrm_dagster.llm import registry as backends

from .test_round import registry, tiny_policy  # noqa: F401 (fixtures)
from .test_simulated_round import SIMULATED, champion_root  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore")

OUT_OF_MEMORY = "CUDA out of memory (injected by the test's backend)"


class FailingBackend:
    """Transformers decoding, except for model folders whose path contains `fails_on` while the file `while_file`
    exists (a device out of memory for a while, the same backend settings before and after): every request fails
    there."""

    name = "failing"
    batches_in_process = False

    def __init__(self, spec: FailingSpec):
        self.spec = spec
        self.inner = TransformersSpec(model=spec.model, device="cpu").build()
        self.model_id = self.inner.model_id

    def generate(self, requests):
        spec = self.spec
        if spec.fails_on in (spec.model or "") and Path(spec.while_file).exists():
            return [Completion("", 0, 0, finish_reason="error", error=OUT_OF_MEMORY) for _ in requests]
        return self.inner.generate(requests)


@engine_config
class FailingSpec:
    kind: Literal["failing"] = Field(default="failing", kw_only=True, description="The backend kind")
    model: str | None = Field(default=None, description="The model folder")
    fails_on: str = Field(default="", description="Model folders whose path contains this fail")
    while_file: str = Field(default="/nonexistent", description="... while this file exists")
    max_batch_size: int = Field(default=8, description="Rows per forward pass (the round sets it)")

    loads_model_folders: ClassVar[bool] = True

    def build(self) -> FailingBackend:
        return FailingBackend(self)


@pytest.fixture
def failing_registered(monkeypatch):
    monkeypatch.setattr(backends.BACKENDS, "_entries", dict(backends.BACKENDS.all()))  # for this test only
    register_backend(FailingSpec)


def sampled_policies(monkeypatch) -> list[str]:
    """The policies whose held-out plans a round samples, in order."""
    from orchrm_dagster.grpo import heldout as round_module

    sampled = []
    sample_plans = round_module.sample_plans
    monkeypatch.setattr(round_module, "sample_plans", lambda policy, *a, **k: sampled.append(policy.name) or
                        sample_plans(policy, *a, **k))
    return sampled


@pytest.mark.parametrize("fails_on", ["r0001", "tiny_policy", "/"])  # the new policy, the start, both
def test_a_side_whose_decoding_failed_leaves_the_round_unverified_and_is_never_reused(
        failing_registered, champion_root, tiny_policy, monkeypatch, fails_on, tmp_path):  # noqa: F811
    unpromoted = dataclasses.replace(SIMULATED, policy_margin=-1e9)
    out_of_memory = tmp_path / "out-of-memory"
    out_of_memory.touch()
    backend = FailingSpec(fails_on=fails_on, while_file=str(out_of_memory))
    first = run_round(champion_root, 1, unpromoted, registry(tiny_policy), backend).row
    assert first["verdict"] == UNVERIFIED and first["promoted"] is False and not first["reward_hacking"]
    assert OUT_OF_MEMORY in first["reason"] and "held-out plans" in first["reason"]
    plans = SIMULATED.heldout_problems * SIMULATED.heldout_samples
    failed = {"before": fails_on != "r0001", "after": fails_on != "tiny_policy"}
    for side, did in failed.items():
        assert first[f"heldout_failed_{side}"] == (plans if did else 0)
        assert (first[f"heldout_failure_{side}"] is not None) == did
        assert (first[f"heldout_plans_{side}"] == 0) == did  # no failed plan counts as measured, nor as wrong
    assert first["heldout_accuracy"] is None or not failed["after"]
    [checkpoint] = read_table(champion_root, "policy_checkpoints")
    assert checkpoint["promoted"] is False and checkpoint["in_use"] is False
    # the next round, where nothing fails, measures afresh what failed (under the same key): a failed side is never
    # reused, a measured one is
    out_of_memory.unlink()
    sampled = sampled_policies(monkeypatch)
    second = run_round(champion_root, 2, unpromoted, registry(tiny_policy), backend).row
    assert second["heldout_failed_before"] == second["heldout_failed_after"] == 0
    assert second["heldout_key_before"] == first["heldout_key_before"]
    assert sampled == (["tiny", "grpo-r0002"] if failed["before"] else ["grpo-r0002"])
    assert second["verdict"] != UNVERIFIED and second["heldout_plans_before"] == plans
