"""A policy round a person can watch: GRPO and the supervised methods (DPO, RFT) report to TensorBoard in the new
policy's folder (published with it) when asked, and nowhere by default."""

import dataclasses

import pytest

from orchrm_dagster.grpo import GRPOSettings
from orchrm_dagster.grpo.methods import MethodContext, fine_tune
from orchrm_dagster.grpo.methods.base import supervised_args
from orchrm_dagster.grpo.train import grpo_config, train_round
from tests.rm.test_training_logs import event_files, scalars

pytestmark = pytest.mark.filterwarnings("ignore")

# short plans without the grammar: what is logged, not what is sampled, is under test here
SETTINGS = GRPOSettings(steps=1, group_size=2, micro_batch_size=1, max_completion_tokens=16, grammar=False,
                        device="cpu", checkpoint_minutes=0, learning_rate=1e-3, report_to="tensorboard",
                        kl_beta=0.001)  # KL on, so that it is logged


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory) -> str:
    from tests.tiny_models import make_tiny_policy

    return make_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


def varied_reward(completions, completion_ids, **kwargs) -> list[float]:
    return [float(sum(ids) % 7) for ids in completion_ids]


def test_a_watched_grpo_step_writes_loss_and_reward_into_the_policy_it_saves(tiny_policy, tmp_path):
    from datasets import Dataset

    prompts = Dataset.from_list([{"prompt": [{"role": "user", "content": "Plan: what is 2 + 2?"}], "problem_id": "0"}])
    run = tmp_path / "r0001"
    outcome = train_round(tiny_policy, prompts, [varied_reward], SETTINGS, str(run))
    logs = SETTINGS.training_logs(str(run), "model")
    assert logs.folder == str(run / "model" / "logs") and logs.run_name == "grpo-r0001"
    [event_file] = event_files(run)
    logged = scalars(logs.folder)
    print(f"\n{event_file}\n" + "\n".join(f"  {tag}: {values}" for tag, values in sorted(logged.items())))
    assert len(logged["train/loss"]) == outcome.steps == 1
    assert logged["train/reward"] == [pytest.approx(outcome.log_history[0]["reward"])]
    assert "train/kl" in logged


def test_grpos_config_reports_to_the_settings_integrations_under_the_rounds_run_name(tmp_path):
    unwatched = dataclasses.replace(SETTINGS, report_to=(), logging_dir=None)
    assert grpo_config(SETTINGS, str(tmp_path), "cpu").report_to == ["tensorboard"]
    assert grpo_config(unwatched, str(tmp_path), "cpu").report_to == []  # TRL reads "none" as no integration
    assert grpo_config(SETTINGS, str(tmp_path / "r0004"), "cpu").run_name == "grpo-r0004"


def test_a_supervised_method_reports_to_its_policys_folder(tiny_policy, tmp_path):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    settings = dataclasses.replace(SETTINGS, method="rft")
    context = MethodContext(root=None, round_number=2, model_dir=tiny_policy, policy=None, problems=[], held_out=[],
                            settings=settings, scorer=None, rm_version=1, subagents=None, executor=None,
                            output_dir=str(tmp_path / "r0002"))
    args = SFTConfig(**supervised_args(context, batch_size=1, epochs=1), max_length=64)
    assert (args.report_to, args.run_name) == (["tensorboard"], "rft-r0002")
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Plan: 2 + 2?"}],
                                  "completion": [{"role": "assistant", "content": "<agent>4</agent>"}]}])
    trainer = SFTTrainer(model=tiny_policy, args=args, train_dataset=dataset,
                         processing_class=AutoTokenizer.from_pretrained(tiny_policy))
    steps, _ = fine_tune(trainer, context)
    assert len(scalars(str(tmp_path / "r0002" / "model" / "logs"))["train/loss"]) == steps == 1
