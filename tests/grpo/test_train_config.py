"""What a round asks TRL's GRPOTrainer for: bf16 and activation checkpointing from the settings and the device,
and the rewards' weights and normalization."""

import pytest

from orchrm_dagster.grpo import GRPOSettings
from orchrm_dagster.grpo.train import grpo_config, memory_and_precision


def native(answer):
    return lambda device: answer


@pytest.mark.parametrize("device, native_bf16, expected", [
    ("cuda", True, {"bf16": True, "activation_checkpointing": False}),  # a GPU with native bf16
    ("cuda", False, {"bf16": False, "activation_checkpointing": False}),  # no native bf16 (pre-Ampere)
    ("cpu", False, {"bf16": False, "activation_checkpointing": False}),
    ("cpu", True, {"bf16": False, "activation_checkpointing": False}),  # no bf16 even on a CPU with AMX / AVX512-BF16
])
def test_by_default_checkpointing_is_off_and_bf16_only_on_a_cuda_that_runs_it(device, native_bf16, expected):
    # off: checkpointed layers keep no KV cache, so a group's prompt could not be forwarded once (shared_prefix)
    assert memory_and_precision(GRPOSettings(), device, native(native_bf16)) == expected


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_precision_and_checkpointing_set_explicitly_win(device):
    fp32 = GRPOSettings(precision="fp32", activation_checkpointing=True)
    assert memory_and_precision(fp32, device, native(True)) == {"bf16": False, "activation_checkpointing": True}
    bf16 = GRPOSettings(precision="bf16", activation_checkpointing=False)
    assert memory_and_precision(bf16, device, native(False)) == {"bf16": True, "activation_checkpointing": False}


def test_the_cpu_config_carries_the_weights_and_grpos_group_normalization(tmp_path):
    settings = GRPOSettings(rewards=("orchrm", "trajectory"), reward_weights=(1.0, 0.25), precision="fp32",
                            activation_checkpointing=True)
    config = grpo_config(settings, str(tmp_path), "cpu")
    assert config.reward_weights == [1.0, 0.25] and config.scale_rewards == "group"
    assert config.multi_objective_aggregation == "sum_then_normalize"
    assert config.bf16 is False and config.activation_checkpointing is True and config.use_cpu is True
    assert grpo_config(GRPOSettings(), str(tmp_path), "cpu").reward_weights == [1.0]


def test_unset_the_whole_group_is_one_pass_of_each_process():
    whole = grpo_config(GRPOSettings(group_size=8), "unused", "cpu")
    assert (whole.per_device_train_batch_size, whole.gradient_accumulation_steps) == (8, 1)
    assert GRPOSettings(group_size=8, processes=2).micro_batch == 4  # each process's share
    assert grpo_config(GRPOSettings(group_size=8, micro_batch_size=2), "unused", "cpu").gradient_accumulation_steps == 4


def test_a_rounds_lora_is_the_shared_helpers_and_its_policy_is_saved_merged(tmp_path):
    """The policy's LoRA and merge-and-save are `orchrm_dagster.lora`'s, as the reward model's."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchrm_dagster.grpo.train import MODEL_SUBDIR, lora_config, save_policy
    from tests.tiny_models import make_tiny_policy

    assert lora_config(GRPOSettings(), "cuda") is None  # unset: every weight on a GPU, LoRA on the CPU
    assert lora_config(GRPOSettings(lora_rank=4), "cpu").r == 4
    assert lora_config(GRPOSettings(lora=False), "cpu") is None
    settings = GRPOSettings(lora=True, lora_rank=4)
    config = lora_config(settings)
    assert (config.r, config.lora_alpha, config.task_type) == (4, 8, "CAUSAL_LM")

    from peft import get_peft_model

    folder = make_tiny_policy(tmp_path / "policy")
    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(folder), config)
    torch.nn.init.normal_(policy.base_model.model.model.layers[0].self_attn.q_proj.lora_B["default"].weight)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        adapted = policy.eval()(input_ids=ids).logits
    trainer = SimpleNamespace(model=policy, processing_class=AutoTokenizer.from_pretrained(folder),
                              is_world_process_zero=lambda: True)
    save_policy(trainer, settings, str(tmp_path / "round"))
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "round" / MODEL_SUBDIR)).eval()
    assert not any("lora" in name for name in merged.state_dict())
    with torch.inference_mode():
        assert torch.allclose(merged(input_ids=ids).logits, adapted, atol=1e-5)


def test_every_training_problem_a_round_takes_is_trained_on():
    from orchrm_dagster.grpo.problems import plan_dataset
    from orchrm_dagster.orchestration import PolicySpec, Problem

    problems = [Problem(f"gsm8k/{i}", "gsm8k", f"What is {i} + 1?", str(i + 1), "math") for i in range(6)]
    settings = GRPOSettings()
    assert settings.train_problems is None and settings.problems_per_round == settings.steps  # one a step
    dataset = plan_dataset(PolicySpec(name="p", prompt="orchestrator_fewshot"), problems[:settings.problems_per_round],
                           settings)
    assert dataset["problem_id"] == [p.problem_id for p in problems]  # each step one problem's group, each once
    more = plan_dataset(PolicySpec(name="p"), problems[:2], GRPOSettings(steps=5, train_problems=2))
    assert more["problem_id"] == ["gsm8k/0", "gsm8k/1"] * 2 + ["gsm8k/0"]  # more steps than problems: in turn
    with pytest.raises(ValueError, match="never trained on"):  # problems rolled out and never trained on
        GRPOSettings(steps=2, train_problems=4)
    assert GRPOSettings(method="dpo", steps=2, train_problems=4).problems_per_round == 4  # DPO trains on them all


def test_the_learning_rate_follows_what_trains():
    assert GRPOSettings().learning_rate_on("cpu") == 1e-3  # LoRA on the CPU: the rate measured to learn
    assert GRPOSettings().learning_rate_on("cuda") == 2e-5  # every weight on a GPU
    assert GRPOSettings(lora=True).learning_rate_on("cuda") == 1e-3
    assert GRPOSettings(learning_rate=5e-4).learning_rate_on("cpu") == 5e-4
    config = grpo_config(GRPOSettings(device="cpu"), "/tmp/unused", "cpu")
    assert config.learning_rate == 1e-3 and config.lr_scheduler_type == "constant" and config.beta == 0.0
