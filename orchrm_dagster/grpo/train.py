"""One GRPO run with TRL's GRPOTrainer on a prompt dataset, resumable from its last saved step.

On transformers generation the trainer samples plans with the runner's own decoding routine (TRL's `rollout_func`:
one batched call per generation batch, a KV cache, seeded rows, the plan grammar as an xgrammar mask), so every plan
parses and a group's rewards differ by what the plan does, not by whether it parses. The grammar shapes which tokens
can be sampled; GRPO's log-probabilities are the policy's own, as TRL computes them (its fused LM head scores only the
completion tokens, in tiles, without the plans x tokens x vocabulary logits).

What every training method's trainer shares is here too, below the methods: what a training returns
(`TrainOutcome`), its precision and memory (`memory_and_precision`), LoRA (`lora_config`), the folder the new policy
is saved in (`MODEL_SUBDIR`, `save_policy`) and what its log says (`logged_mean`, `logged_tokens`). `settings` is the
round's `GRPOSettings`, read by its fields: the settings stand above the methods (see `grpo.methods.base`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import time
from dataclasses import dataclass

from orchrm_dagster.devices import resolve_device
from orchrm_dagster.faults import fault_point
from orchrm_dagster.grpo.profile import phase
from orchrm_dagster.grpo.progress import step_callback
from orchrm_dagster.spending import spend
from orchrm_dagster.grpo.rewards import raw_metric
from orchrm_dagster.llm import ChatRequest, Completion, SamplingSettings, resolved_cache_kind
from orchrm_dagster.lora import lora_config as shared_lora_config
from orchrm_dagster.lora import save_trained
from orchrm_dagster.orchestration import sample_seed
from orchrm_dagster.plans import TextBounds, plan_grammar_ebnf
from orchrm_dagster.processes import by_first_process, process_rank
from orchrm_dagster.rm import bf16_supported
from orchrm_dagster.trainer_args import activation_checkpointing_arg
from orchrm_dagster.trainer_checkpoints import (MODEL_SUBDIR, adapter_checkpoints, checkpoint_args,
                                               last_whole_checkpoint, timed_checkpoints)

RUN_KEY_FILE = "run_key.json"


@dataclass(frozen=True)
class TrainOutcome:
    steps: int
    mean_reward: float | None  # the weighted sum of the rewards' means on their own scales (`raw/<name>`)
    kl: float | None
    generation_tokens: int
    generation_seconds: float  # wall time sampling plans (transformers generation; 0 for vLLM)
    log_history: list[dict]
    # set by the round's training method (grpo/methods/): every token it spent, and why it trained nothing
    reward_tokens: int = 0  # read by reward models, panels or judges
    rollout_tokens: int = 0  # sub-agent tokens of plan executions
    training_tokens: int = 0  # read in the trainer's forward passes (prompt + completion of each example, per epoch)
    untrained: str | None = None  # why the method trained nothing (the round is recorded, not published)
    # each generation call's (seconds, completion tokens), in order (transformers generation; empty for vLLM): the
    # first pays the process's warm-up, the later ones show the steady rate
    generation_calls: tuple[tuple[float, int], ...] = ()
    trained_problems: tuple[str, ...] = ()  # the problems whose groups the optimizer steps trained on, in order


def memory_and_precision(settings, device: str, native_bf16=bf16_supported) -> dict:
    """GRPOConfig's `bf16` and activation checkpointing (by the name this transformers reads, `trainer_args`): with
    precision auto, bf16 mixed precision on a GPU that runs it natively (on the CPU fp32: autocast there is unmeasured
    for rounds and changes what the tests train); activation checkpointing only when asked for (it drops the KV cache
    that lets a group's prompt be forwarded once, `shared_prefix`); `native_bf16(device)` asks the hardware."""
    if settings.precision == "auto":
        bf16 = device == "cuda" and native_bf16(device)
    else:
        bf16 = settings.precision == "bf16"
    return {"bf16": bf16, **activation_checkpointing_arg(bool(settings.activation_checkpointing))}


def lora_config(settings, device: str | None = None):
    """The trainer's `peft_config`: LoRA adapters of `lora_rank` where the settings use LoRA on `device` (the shared
    `orchrm_dagster.lora` helper, as the reward model's), else None (every weight trains)."""
    if not settings.uses_lora(device or resolve_device(settings.device)):
        return None
    return shared_lora_config(settings.lora_rank, task_type="CAUSAL_LM")


def grpo_config(settings, output_dir: str, device: str):
    from trl import GRPOConfig

    return GRPOConfig(
        # one optimizer step = one problem's group, in micro-batches (a whole group of long prompts at once takes
        # tens of GB: the logits alone are plans x tokens x a 49k vocabulary)
        output_dir=output_dir, per_device_train_batch_size=settings.micro_batch,
        gradient_accumulation_steps=settings.group_size // (settings.micro_batch * settings.processes),
        num_generations=settings.group_size,
        max_completion_length=settings.max_completion_tokens, learning_rate=settings.learning_rate_on(device),
        lr_scheduler_type=settings.lr_scheduler,
        beta=settings.kl_beta, epsilon=settings.clip_epsilon, temperature=settings.temperature,
        max_steps=settings.steps, seed=settings.seed, use_cpu=device == "cpu",
        **memory_and_precision(settings, device),
        # each reward is already normalized within its group (rewards/rule.py); the weighted sum is normalized
        # within the group again, GRPO's advantage. Set here, not left to TRL's defaults.
        reward_weights=list(settings.weights), multi_objective_aggregation="sum_then_normalize", scale_rewards="group",
        logging_steps=1, **settings.training_logs(output_dir, MODEL_SUBDIR).trainer_args(),
        **checkpoint_args(),  # by the clock: `train_round`'s callback
        disable_tqdm=True, shuffle_dataset=False, **vllm_args(settings, device))


def vllm_args(settings, device: str) -> dict:
    """GRPOConfig's vLLM arguments where the round generates with vLLM on `device` (none for transformers): the plan
    grammar goes to vLLM's structured outputs (xgrammar reads the same EBNF as the runner's decoding)."""
    generation = settings.generation_on(device)
    if generation == "transformers":
        return {}
    args = {"use_vllm": True, "vllm_mode": "colocate" if generation == "vllm_colocate" else "server"}
    if settings.vllm_server_url:
        args["vllm_server_base_url"] = settings.vllm_server_url
    grammar = plan_grammar(settings)
    if grammar is not None:
        args["generation_kwargs"] = {"structured_outputs": {"grammar": grammar}}
    return args


def plan_grammar(settings) -> str | None:
    """The plan grammar sampled plans follow (fit to the round's plan budget and agent limit); None: grammar off."""
    if not settings.grammar:
        return None
    return plan_grammar_ebnf(max_agents=settings.max_agents, bounds=TextBounds.fit(settings.max_completion_tokens,
                                                                                   settings.max_agents))


def train_round(model_dir: str, dataset, reward_funcs: list, settings, output_dir: str) -> TrainOutcome:
    """Trains from `model_dir` and saves the policy to output_dir/model; resumes from output_dir's last trainer
    checkpoint when the run key (model, settings, prompts) is the same as the interrupted run's."""
    from transformers import AutoTokenizer

    device = resolve_device(settings.device)
    # where the round reports to is no reason to start it over
    watched = dataclasses.replace(settings, report_to=(), logging_dir=None)
    checkpoint = _checkpoint_to_resume(output_dir, {"model": model_dir, "settings": repr(watched),
                                                    "prompts": list(dataset["problem_id"])})
    with phase("policy load (trainer set-up)"):
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        args = grpo_config(settings, output_dir, device)
        sampler = PlanSampler(tokenizer, settings) if settings.generation_on(device) == "transformers" else None
        trainer = round_trainer_class()(model=model_dir, reward_funcs=reward_funcs, args=args, train_dataset=dataset,
                                        processing_class=tokenizer, peft_config=lora_config(settings, device),
                                        rollout_func=sampler,
                                        callbacks=[timed_checkpoints(settings.checkpoint_minutes),
                                                   step_callback()])
    # only the first of several processes starts the logs over: the others would remove what it writes
    settings.training_logs(output_dir, MODEL_SUBDIR).attach(
        trainer, resumed=checkpoint is not None or not trainer.is_world_process_zero())
    with phase("training: backward, optimizer and TRL's own work"):
        trainer.train(resume_from_checkpoint=checkpoint)
    save_policy(trainer, settings, output_dir)
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    return TrainOutcome(steps=trainer.state.global_step, mean_reward=_weighted_raw_mean(logged, reward_funcs, settings),
                        kl=logged_mean(logged, "kl"),
                        generation_tokens=sampler.tokens if sampler else generated_tokens(
                            trainer.state.log_history, completions_per_step(args)),
                        generation_seconds=sum(seconds for seconds, _ in sampler.calls) if sampler else 0.0,
                        generation_calls=tuple(sampler.calls) if sampler else (),
                        log_history=list(trainer.state.log_history),
                        # one prompt's group a step, the dataset in order (shuffle_dataset off)
                        trained_problems=tuple(dataset["problem_id"][:trainer.state.global_step]))


def save_policy(trainer, settings, output_dir: str) -> None:
    """Saves the trained policy (its LoRA adapters merged in) and its tokenizer to output_dir/MODEL_SUBDIR: the
    folder the round publishes (by the first of several data-parallel processes)."""
    if trainer.is_world_process_zero():
        with phase("policy save"):
            save_trained(trainer.model, trainer.processing_class, os.path.join(output_dir, MODEL_SUBDIR),
                         merge=True, fault="round.policy_save")


@functools.cache
def round_trainer_class() -> type:
    """TRL's GRPOTrainer with each group's prompt forwarded once (`shared_prefix`), its checkpoints timed and, with
    LoRA, holding the adapters alone."""
    from trl import GRPOTrainer

    from orchrm_dagster.grpo.shared_prefix import shared_prefix_trainer  # torch: when a round trains, not on import

    class RoundTrainer(adapter_checkpoints(shared_prefix_trainer(GRPOTrainer))):
        def _save_checkpoint(self, model, trial):
            with phase("trainer checkpoints"):
                return super()._save_checkpoint(model, trial)

        def _save_optimizer_and_scheduler(self, output_dir):
            fault_point("round.trainer_checkpoint")  # the weights are written; the trainer's state is not
            return super()._save_optimizer_and_scheduler(output_dir)

    return RoundTrainer


class PlanSampler:
    """TRL's `rollout_func` for transformers generation: the generation batch (each prompt once per plan of its
    group) sampled in one batched call of the runner's decoding routine on the live policy, under the plan grammar.
    Row i of step s is seeded from (settings.seed, s, i), so a round with the same seed samples the same plans."""

    def __init__(self, tokenizer, settings):
        self.tokenizer = tokenizer
        self.settings = settings
        self.grammar = plan_grammar(settings)
        self.calls: list[tuple[float, int]] = []  # (seconds, completion tokens) of each call
        self.prompt_tokens = 0  # the prompts' tokens, each row's (the policy reads them to generate)

    @property
    def tokens(self) -> int:
        """What this attempt's calls read and generated (a resumed training's earlier steps are its killed attempt's,
        counted in that attempt's journal)."""
        return self.prompt_tokens + sum(tokens for _, tokens in self.calls)

    def __call__(self, prompts: list, trainer) -> dict:
        with phase("generation"):
            return self._sample(prompts, trainer)

    def _sample(self, prompts: list, trainer) -> dict:
        from trl.models.utils import unwrap_model_for_generation

        from orchrm_dagster.llm import loaded_model, release_static_caches, sample_rows

        fault_point("round.generating")
        started = time.perf_counter()
        requests = self.requests(prompts, trainer.state.global_step)
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs
                                         ) as model:
            rows = sample_rows(loaded_model(model, self.tokenizer), requests, max_batch_size=len(requests),
                               decoding_cache=self.settings.decoding_cache)
            if resolved_cache_kind(self.settings.decoding_cache, model.device.type) == "static":
                # the backward pass must not share the device with the cache; the next step's cache is new static
                # addresses, so its CUDA graphs are recorded again each step: one reason static is not the default
                release_static_caches(model)
        seconds = time.perf_counter() - started
        failed = next((row.error for row in rows if isinstance(row, Completion)), None)
        if failed is not None:
            raise RuntimeError(f"sampling plans failed: {failed}")
        self.calls.append((seconds, sum(len(row.tokens) for row in rows)))
        prompts_read = sum(len(row.prompt_ids) for row in rows)
        self.prompt_tokens += prompts_read
        spend("generation", prompts_read + self.calls[-1][1])
        # logprobs None: GRPO's old log-probabilities are the policy's own, computed by TRL
        return {"prompt_ids": [row.prompt_ids for row in rows], "completion_ids": [row.tokens for row in rows],
                "logprobs": None}

    def requests(self, prompts: list, step: int) -> list[ChatRequest]:
        """The requests of step `step`'s generation batch (row i seeded from (seed, step, i), and the process's index
        where several share the batch: a group split over processes must not repeat its seeds)."""
        return [self._request(prompt, step, row) for row, prompt in enumerate(prompts)]

    def _step_key(self, step: int) -> str:
        rank = process_rank()
        return f"grpo-step-{step}" + (f"-process-{rank}" if rank else "")

    def _request(self, prompt: list[dict], step: int, row: int) -> ChatRequest:
        settings = self.settings
        sampling = SamplingSettings(temperature=settings.temperature, max_new_tokens=settings.max_completion_tokens,
                                    seed=sample_seed(settings.seed, self._step_key(step), row))
        return ChatRequest(tuple(prompt), sampling, grammar=self.grammar)


def completions_per_step(args) -> int:
    """Plans sampled per optimizer step: one generation batch (steps_per_generation = gradient accumulation)."""
    return args.generation_batch_size * args.gradient_accumulation_steps // args.steps_per_generation


def generated_tokens(log_history: list[dict], completions_per_logged_step: int) -> int:
    """Completion tokens the policy generated, in every generation mode (vLLM included), from what TRL logs each
    step: the mean completion length over that step's plans (logging_steps=1)."""
    return sum(round(entry["completions/mean_length"] * completions_per_logged_step)
               for entry in log_history if "completions/mean_length" in entry)


def _weighted_raw_mean(entries: list[dict], reward_funcs: list, settings) -> float | None:
    means = [logged_mean(entries, raw_metric(func.__name__)) for func in reward_funcs]
    return None if None in means else sum(w * m for w, m in zip(settings.weights, means))


def logged_mean(log_history: list[dict], key: str) -> float | None:
    """The mean of what a TRL trainer logged under `key` (None: never logged)."""
    values = [float(entry[key]) for entry in log_history if key in entry]
    return sum(values) / len(values) if values else None


def _checkpoint_to_resume(output_dir: str, run_key: dict) -> str | None:
    """The last trainer checkpoint of an interrupted run with the same run key; else None, the folder started over
    (by the first of several processes, before any reads it)."""
    by_first_process(lambda: _resumable(output_dir, run_key) or _start_over(output_dir, run_key))
    return _resumable(output_dir, run_key)


def _resumable(output_dir: str, run_key: dict) -> str | None:
    try:
        with open(os.path.join(output_dir, RUN_KEY_FILE)) as source:
            same = json.load(source) == run_key
    except (OSError, ValueError):
        same = False
    return last_whole_checkpoint(output_dir) if same else None


def _start_over(output_dir: str, run_key: dict) -> None:
    shutil.rmtree(output_dir, ignore_errors=True)
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, RUN_KEY_FILE), "w") as out:
        json.dump(run_key, out)
