"""How a GRPO round samples its plans: the runner's batched, grammar-constrained decoding on the live policy, seeded
so that a round with the same seed samples the same plans, and a count of generated tokens that holds in every
generation mode."""

import pytest
import xgrammar as xgr

from orchrm_dagster.grpo import GRPOSettings
from orchrm_dagster.grpo.train import completions_per_step, generated_tokens, grpo_config, plan_grammar, train_round
from orchrm_dagster.llm import compile_grammar, vllm_backend
from orchrm_dagster.plans import TextBounds, plan_grammar_ebnf

pytestmark = pytest.mark.filterwarnings("ignore")


def test_generated_tokens_add_up_every_logged_steps_mean_completion_length():
    # what TRL logs per optimizer step, the same for transformers and vLLM generation (a stub of its log history)
    log_history = [{"completions/mean_length": 205.125, "loss": 0.1}, {"completions/mean_length": 100.0},
                   {"train_runtime": 3.0}]
    assert generated_tokens(log_history, 8) == 1641 + 800
    assert generated_tokens([{"train_runtime": 3.0}], 8) == 0


@pytest.mark.parametrize("generation", ["transformers", "vllm_colocate", "vllm_server"])
def test_a_step_samples_one_whole_group_whatever_the_micro_batch(tmp_path, generation):
    settings = GRPOSettings(group_size=8, micro_batch_size=2, generation=generation)
    assert completions_per_step(grpo_config(settings, str(tmp_path), "cpu")) == 8


def test_a_round_generates_with_transformers_on_every_device_even_where_vllm_imports(monkeypatch):
    monkeypatch.setattr(vllm_backend, "vllm_imports", lambda: True)  # vLLM has not run on a GPU here
    assert GRPOSettings().generation_on("cuda") == "transformers"
    assert GRPOSettings().generation_on("cpu") == "transformers"
    assert GRPOSettings(generation="vllm_colocate").generation_on("cuda") == "vllm_colocate"


def test_a_round_on_vllm_keeps_the_plan_grammar(tmp_path):
    settings = GRPOSettings(generation="vllm_colocate", group_size=8, micro_batch_size=2)
    args = grpo_config(settings, str(tmp_path), "cpu")
    assert args.use_vllm and args.vllm_mode == "colocate"
    assert args.generation_kwargs == {"structured_outputs": {"grammar": plan_grammar(settings)}}
    assert plan_grammar(settings) == plan_grammar_ebnf(max_agents=settings.max_agents, bounds=TextBounds.fit(
        settings.max_completion_tokens, settings.max_agents))
    off = grpo_config(GRPOSettings(generation="vllm_server", grammar=False), str(tmp_path), "cpu")
    assert off.use_vllm and not off.generation_kwargs
    assert not grpo_config(GRPOSettings(), str(tmp_path), "cpu").use_vllm  # auto on the CPU: transformers


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory) -> str:
    from tests.tiny_models import make_tiny_policy

    return make_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


class RecordingReward:
    """A reward that differs between plans (so the policy's weights move) and keeps what it was given."""

    __name__ = "recording"

    def __init__(self):
        self.completion_ids: list[list[int]] = []

    def __call__(self, completions, completion_ids, **kwargs) -> list[float]:
        self.completion_ids += completion_ids
        return [float(sum(ids) % 7) for ids in completion_ids]


def _round(model_dir: str, output_dir: str, settings: GRPOSettings):
    from datasets import Dataset

    reward = RecordingReward()
    prompts = [{"prompt": [{"role": "user", "content": f"Plan question {i}: what is {i} + 2?"}], "problem_id": str(i)}
               for i in range(settings.steps)]
    return train_round(model_dir, Dataset.from_list(prompts), [reward], settings, output_dir), reward


SETTINGS = GRPOSettings(steps=1, group_size=2, micro_batch_size=1, max_completion_tokens=324, device="cpu",
                        checkpoint_minutes=0, learning_rate=1e-3)


def test_a_round_samples_grammar_plans_trains_and_saves_a_loadable_checkpoint(tiny_policy, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    outcome, reward = _round(tiny_policy, str(tmp_path / "a"), SETTINGS)
    assert outcome.steps == 1 and len(reward.completion_ids) == SETTINGS.group_size
    completions = sum(map(len, reward.completion_ids))
    prompts = outcome.generation_tokens - completions  # the group's prompt, read once a row: counted (issue 55)
    assert completions > 0 and prompts > 0 and prompts % SETTINGS.group_size == 0 and outcome.generation_seconds > 0
    # one generation call per step, with its own seconds and the tokens it sampled (as TRL logged them)
    assert [tokens for _, tokens in outcome.generation_calls] == [completions]
    assert all(seconds > 0 for seconds, _ in outcome.generation_calls)
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    grammar = plan_grammar_ebnf(max_agents=SETTINGS.max_agents, bounds=TextBounds.fit(
        SETTINGS.max_completion_tokens, SETTINGS.max_agents))
    compiled = compile_grammar(tokenizer, grammar, vocab_size=len(tokenizer), stop_token_ids=[tokenizer.eos_token_id])
    for ids in reward.completion_ids:  # every sampled token is one the plan grammar allows
        matcher = xgr.GrammarMatcher(compiled)
        assert all(matcher.accept_token(token) for token in ids)
    trained = AutoModelForCausalLM.from_pretrained(str(tmp_path / "a" / "model"))
    start = AutoModelForCausalLM.from_pretrained(tiny_policy)
    assert any(not torch.equal(a, b) for a, b in zip(trained.state_dict().values(), start.state_dict().values()))


def test_a_round_with_the_same_seed_samples_the_same_plans(tiny_policy, tmp_path):
    first, reward = _round(tiny_policy, str(tmp_path / "a"), SETTINGS)
    again, replay = _round(tiny_policy, str(tmp_path / "b"), SETTINGS)
    assert replay.completion_ids == reward.completion_ids and again.generation_tokens == first.generation_tokens


def test_a_steps_requests_are_seeded_by_step_and_row_so_they_can_be_replayed(tiny_policy):
    from transformers import AutoTokenizer

    from orchrm_dagster.grpo.train import PlanSampler

    sampler = PlanSampler(AutoTokenizer.from_pretrained(tiny_policy), SETTINGS)
    prompts = [[{"role": "user", "content": "Plan question 0"}]] * 3
    seeds = [[r.sampling.seed for r in sampler.requests(prompts, step)] for step in (0, 0, 1)]
    assert seeds[0] == seeds[1] and len(set(seeds[0])) == 3 and not set(seeds[0]) & set(seeds[2])
    assert all(r.grammar == sampler.grammar and r.messages == tuple(prompts[0]) for r in sampler.requests(prompts, 0))
