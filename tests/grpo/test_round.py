"""A whole GRPO round on a tiny random Llama (SmolLM2's tokenizer) against a tiny reward model: what it publishes,
what a crash leaves behind, and how the next attempt resumes."""

import pytest

from orchrm_dagster.grpo import GRPOSettings, OrchRMReward, checkpoint_policies, read_table, run_round
from orchrm_dagster.llm import BackendSpec
from orchrm_dagster.orchestration import PolicySpec

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory) -> str:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, set_seed

    from orchrm_dagster.llm import EMBEDDED_GGUF, embedded_model_dir

    folder = tmp_path_factory.mktemp("tiny_policy")
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir()), gguf_file=EMBEDDED_GGUF)
    set_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def champion_root(storage_root, tiny_backbone):
    from orchrm_dagster.rm import RMTrainConfig, train_new_version

    from ..rm.toy import toy_pairs

    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4, save_steps=100)
    train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(4, 1), config, ["x"])
    return storage_root


SETTINGS = GRPOSettings(policy="tiny", steps=2, group_size=2, train_problems=2, heldout_problems=1,
                        heldout_samples=2, heldout_execute=False, device="cpu", save_steps=1)


def registry(tiny_policy):
    return {"tiny": PolicySpec(name="tiny", kind="specialized", model=tiny_policy)}


def test_a_round_publishes_a_checkpoint_policy_and_its_row(champion_root, tiny_policy):
    outcome = run_round(champion_root, 1, SETTINGS, registry(tiny_policy), BackendSpec())
    [row] = read_table(champion_root, "grpo_rounds")
    assert row == outcome.row and row["round"] == 1 and row["steps"] == 2 and row["rm_version"] == 1
    assert row["generation_tokens"] > 0 and row["reward_tokens"] > 0 and row["rollout_tokens"] == 0
    assert row["kl"] is not None and row["heldout_reward_before"] is not None and row["heldout_accuracy"] is None
    [policy] = checkpoint_policies(champion_root)
    assert policy.name == "grpo-r0001" and policy.kind == "checkpoint" and policy.max_new_tokens == 384
    [checkpoint] = read_table(champion_root, "policy_checkpoints")
    assert checkpoint["base_model"] == tiny_policy and checkpoint["reward_mode"] == "orchrm"
    # the next round continues from this checkpoint, and its "before" is this round's "after"
    second = run_round(champion_root, 2, SETTINGS, registry(tiny_policy), BackendSpec())
    assert second.row["heldout_reward_before"] == row["heldout_reward_after"]
    assert read_table(champion_root, "policy_checkpoints")[1]["base_model"] == policy.checkpoint_path


def test_a_crashed_round_publishes_nothing_and_the_next_attempt_resumes_from_its_last_step(
        champion_root, tiny_policy, monkeypatch):
    calls = []
    original = OrchRMReward.__call__

    def crash_on_the_second_step(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("killed mid-round")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OrchRMReward, "__call__", crash_on_the_second_step)
    with pytest.raises(RuntimeError, match="killed mid-round"):
        run_round(champion_root, 1, SETTINGS, registry(tiny_policy), BackendSpec())
    assert read_table(champion_root, "policy_checkpoints") == [] and checkpoint_policies(champion_root) == []
    calls.clear()
    outcome = run_round(champion_root, 1, SETTINGS, registry(tiny_policy), BackendSpec())
    assert outcome.row["steps"] == 2 and len(calls) == 1  # step 1 came from the saved checkpoint


def test_two_rounds_never_run_at_once(champion_root, tiny_policy):
    from filelock import FileLock

    from orchrm_dagster.storage import local_work_dir

    with FileLock(str(local_work_dir(champion_root) / "grpo" / "round.lock")):
        with pytest.raises(RuntimeError, match="another GRPO round"):
            run_round(champion_root, 1, SETTINGS, registry(tiny_policy), BackendSpec())
