"""`dpo`: TRL's DPOTrainer on the champion reward model's own training pairs (the pairs of the recipe it trained on),
a slice per round that moves on round after round: the preference data the reward model learnt from, used on the
policy directly, with no sampling and no reward model in the loop."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.grpo.methods import register_method
from orchrm_dagster.grpo.methods.base import (MethodContext, TrainingMethod, fine_tune, fresh_output_dir,
                                              method_prompts, shared_dataset, supervised_args)
from orchrm_dagster.grpo.problems import round_slice
from orchrm_dagster.grpo.train import TrainOutcome, logged_mean, lora_config
from orchrm_dagster.trainer_args import logged_tokens


@engine_config
class DPOMethodSettings:
    beta: float = Field(default=0.1, description="DPO's beta: how far the policy may move from the round's start")
    pairs_per_round: int = Field(default=4, description="Training pairs per round; each round takes the next ones")
    batch_size: int = Field(default=2, description="Pairs per optimizer step")
    epochs: int = Field(default=1, description="Passes over the round's pairs")
    max_length: int | None = Field(default=None, description="Truncate prompt + plan to this many tokens "
                                                             "(unset: never; plans are short)")

    def __post_init__(self) -> None:
        if min(self.pairs_per_round, self.batch_size, self.epochs) < 1 or self.beta <= 0:
            raise ValueError("dpo: pairs_per_round, batch_size and epochs must be >= 1, beta > 0")


def round_pairs(context: MethodContext, config: DPOMethodSettings) -> list[dict]:
    """This round's slice of the champion's training pairs (sorted by pair_id, wrapping around), held-out problems
    left out. ValueError naming what is missing when there are none."""
    import polars as pl

    from orchrm_dagster.pairs import TRAIN, training_pair_texts
    from orchrm_dagster.rm import pair_problems, trained_on

    sources = trained_on(context.root, context.rm_version)
    seen = pair_problems(context.root, context.rm_version)
    texts = training_pair_texts(context.root).filter(pl.col("split") == TRAIN)
    if sources:
        texts = texts.filter(pl.col("source").is_in(sources))
    if seen is not None:
        texts = texts.filter(pl.col("problem_id").is_in(sorted(seen)))
    texts = texts.filter(~pl.col("problem_id").is_in([p.problem_id for p in context.held_out])).sort("pair_id")
    if texts.is_empty():
        raise ValueError(f"dpo: no training pairs of reward model v{context.rm_version} "
                         f"({', '.join(sources) or 'every source'}, off the held-out problems) in the `pairs` or "
                         f"`imported_pairs` tables of {context.root.url}: materialize `pairs` (or import published "
                         f"pairs) and retrain `reward_model` first")
    return round_slice(texts.to_dicts(), context.round_number, config.pairs_per_round)


def pair_dataset(context: MethodContext, pairs: list[dict]):
    """DPO's conversational preference rows: the question's orchestrator prompt, the chosen and the rejected plan."""
    from datasets import Dataset

    from orchrm_dagster.orchestration import Problem
    from orchrm_dagster.rm import domain_of

    answer_type = domain_of(context.settings.benchmark)
    problems = list({p["problem_id"]: Problem(p["problem_id"], context.settings.benchmark, p["question"], None,
                                              answer_type) for p in pairs}.values())
    prompts = method_prompts(context, problems)
    return Dataset.from_list([{"prompt": prompts[p["problem_id"]],
                               "chosen": [{"role": "assistant", "content": p["chosen_plan"]}],
                               "rejected": [{"role": "assistant", "content": p["rejected_plan"]}]} for p in pairs])


def train(config: DPOMethodSettings, context: MethodContext):
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    pairs = round_pairs(context, config)
    context.on_step(f"round {context.round_number}: DPO on {len(pairs)} pairs of reward model v{context.rm_version}")
    fresh_output_dir(context)
    args = DPOConfig(**supervised_args(context, config.batch_size, config.epochs), beta=config.beta,
                     max_length=config.max_length, precompute_ref_log_probs=True,  # no reference model kept in memory
                     precompute_ref_batch_size=config.batch_size)
    trainer = DPOTrainer(model=context.model_dir, args=args,
                         train_dataset=shared_dataset(pair_dataset(context, pairs), context),
                         processing_class=AutoTokenizer.from_pretrained(context.model_dir),
                         peft_config=lora_config(context.settings))
    steps, history = fine_tune(trainer, context)
    return TrainOutcome(steps=steps, mean_reward=logged_mean(history, "rewards/margins"), kl=None,
                        generation_tokens=0, generation_seconds=0.0, log_history=history,
                        training_tokens=logged_tokens(history))


METHOD = register_method(TrainingMethod(
    name="dpo", description="DPO (TRL) on the champion reward model's own training pairs, a slice per round",
    config=DPOMethodSettings, train=train, reward_mode=lambda settings: "pairs"))
