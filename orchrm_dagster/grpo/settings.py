"""The config of a GRPO round on the orchestrator policy, and of the loop that keeps learning."""

from __future__ import annotations

from typing import Literal

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.orchestration import ExecutionSettings
from orchrm_dagster.rm import ScoringSettings

RewardMode = Literal["orchrm", "trajectory", "collaborative", "orchrm+collaborative", "trajectory+collaborative"]


def small_execution() -> ExecutionSettings:
    """Sub-agent work for trajectory rewards and held-out accuracy: short answers, so a CPU round ends in minutes."""
    return ExecutionSettings(subagent_max_new_tokens=96, concurrent_plans=8,
                             agents={"sc_samples": 3, "debate_rounds": 1})


@engine_config
class GRPOSettings:
    """Defaults follow MAS-Orchestra (8 samples per question, KL 0.001, clip 0.2) with fewer steps, shorter plans and
    a larger learning rate, so a round on the embedded SmolLM2 ends in minutes on 2 CPU cores; on a GPU raise
    steps and train_problems and lower learning_rate towards the paper's 1e-6."""

    reward_mode: RewardMode = Field(
        default="orchrm", description="orchrm: the champion's score of each plan, no rollout; trajectory: execute "
                                      "each plan and reward correctness; collaborative: the verifier panel over the "
                                      "executed trajectory; or a sum of two")
    start: Literal["continue", "scratch"] = Field(
        default="continue", description="continue: from the latest round's checkpoint, else from `policy`; "
                                        "scratch: from `scratch_policy` (train its reward model on "
                                        "correct_over_incorrect pairs only)")
    policy: str = Field(default="smollm2-fewshot", description="The registry policy continued training starts from")
    scratch_policy: str = Field(default="smollm2-base", description="The registry policy a scratch round starts from")
    benchmark: str = Field(default="gsm8k", description="Problems the rounds train on (and hold out)")
    train_problems: int = Field(default=4, description="Problems per round; each round takes the next ones")
    group_size: int = Field(default=8, description="Plans sampled per problem and step (GRPO's group)")
    micro_batch_size: int = Field(default=2, description="Plans per forward/backward pass; the group's gradients "
                                                         "accumulate over group_size / micro_batch_size passes")
    steps: int = Field(default=2, description="Optimizer steps per round (one problem's group per step)")
    learning_rate: float = Field(default=2e-5, description="AdamW learning rate")
    kl_beta: float = Field(default=0.001, description="KL penalty towards the round's starting policy")
    clip_epsilon: float = Field(default=0.2, description="PPO-style ratio clipping")
    temperature: float = Field(default=1.0, description="Sampling temperature of plans while training")
    max_completion_tokens: int = Field(default=384, description="Token budget of a plan (the grammar fits it)")
    max_agents: int = Field(default=2, description="Most sub-agents a plan may use (the grammar enforces it)")
    grammar: bool = Field(default=True, description="Constrain sampled plans to the plan grammar (transformers "
                                                    "generation); a plan that does not parse gets format_penalty")
    format_penalty: float = Field(default=-1.0, description="The reward of a plan that does not parse")
    lora: bool = Field(default=False, description="Train LoRA adapters (peft) instead of every weight")
    lora_rank: int = Field(default=16, description="LoRA rank")
    device: str = Field(default="auto", description="auto | cpu | cuda")
    generation: Literal["transformers", "vllm_colocate", "vllm_server"] = Field(
        default="transformers", description="How the trainer samples plans: transformers (CPU or GPU), or vLLM "
                                            "(colocated engine, or a `trl vllm-serve` server; GPU, gpu extra)")
    vllm_server_url: str | None = Field(default=None, description="vllm_server: the server's base URL")
    save_steps: int = Field(default=1, description="Trainer checkpoint every N steps: an interrupted round "
                                                   "resumes from the last one")
    heldout_problems: int = Field(default=3, description="Problems (the benchmark's last) no round trains on")
    heldout_samples: int = Field(default=2, description="Plans sampled per held-out problem, fixed seeds")
    heldout_execute: bool = Field(default=True, description="Execute the held-out plans for heldout_accuracy")
    heldout_temperature: float = Field(default=0.5, description="Sampling temperature of held-out plans "
                                                                "(MAS-Orchestra evaluates at 0.5)")
    policy_margin: float = Field(default=0.0, description="The policy gate: a round's checkpoint is promoted (rolls "
                                                          "out, and the next round starts from it) only if its "
                                                          "held-out reward fell by no more than this, and its "
                                                          "held-out accuracy, where measured, did not fall")
    execution: ExecutionSettings = Field(default_factory=small_execution,
                                         description="Sub-agents for trajectory rewards and held-out execution")
    scoring: ScoringSettings = Field(default_factory=ScoringSettings, description="How the reward model scores")
    seed: int = Field(default=0, description="Seeds sampling and training")

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2: GRPO compares plans within a group")
        if self.micro_batch_size < 1 or self.group_size % self.micro_batch_size:
            raise ValueError("micro_batch_size must divide group_size")
        if min(self.steps, self.train_problems, self.heldout_problems, self.heldout_samples) < 1:
            raise ValueError("steps, train_problems, heldout_problems and heldout_samples must be >= 1")
