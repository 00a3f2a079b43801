"""The config of a GRPO round on the orchestrator policy, and of the loop that keeps learning."""

from __future__ import annotations

from typing import Literal

from orchrm_dagster.engine_config import Field, engine_config, sections_config
from orchrm_dagster.grpo.gate import GateName, GateRule
from orchrm_dagster.grpo.methods import METHODS, registered_methods
from orchrm_dagster.grpo.rewards import REWARDS, reward_kinds
from orchrm_dagster.llm import DecodingCache, decoding_cache_field
from orchrm_dagster.orchestration import ExecutionSettings
from orchrm_dagster.rm import ScoringSettings
from orchrm_dagster.trainer_checkpoints import checkpoint_minutes_field
from orchrm_dagster.training_logs import ReportTo, TrainingLogs, logging_dir_field, report_to_field, training_logs

RewardName = REWARDS.name_type  # a registered reward's name, or a dotted path to one (my_pkg.my_module:my_reward)
RewardNames = REWARDS.names_type
MethodName = METHODS.name_type  # a registered training method's name, or a dotted path to one
MIN_UNPARSEABLE_MARGIN = 0.01  # below it, the gap could vanish in TRL's float32 weighted sum
LORA_LEARNING_RATE = 1e-3  # measured to learn in a 6-step round on the CPU (docs/learning.md)
FULL_LEARNING_RATE = 2e-5  # every weight trained: not measured on a GPU here


RewardSettings = sections_config(
    "RewardSettings", "Each reward's own settings, by name (read only for the rewards in `rewards`).", reward_kinds(),
    __name__)
MethodSettings = sections_config(
    "MethodSettings", "Each training method's own settings, by name (read only for the round's `method`).",
    registered_methods(), __name__)


def small_execution() -> ExecutionSettings:
    """Sub-agent work for trajectory rewards and held-out accuracy: short answers, so a CPU round ends in minutes."""
    return ExecutionSettings(subagent_max_new_tokens=96, concurrent_plans=8,
                             agents={"sc_samples": 3, "debate_rounds": 1})


@engine_config
class GRPOSettings:
    """The defaults are the round measured to learn on 2 CPU cores with the embedded SmolLM2 (docs/learning.md): 6
    steps of MAS-Orchestra's group of 8 plans (clip 0.2), one training problem a step, LoRA at a constant learning
    rate of 1e-3, KL off, one-agent plans of at most 200 tokens, and 128 executed held-out plans a side for the gate.
    On a GPU (every weight trained) raise steps, agents and plan tokens; full-weight training's learning rate and KL
    were not measured here."""

    method: MethodName = Field(
        default="grpo", description="How the round trains the policy: " + METHODS.described())
    method_settings: MethodSettings = Field(default_factory=MethodSettings,
                                            description="Each training method's own settings section, by name")
    rewards: RewardNames = Field(
        default=("orchrm",), description="What rewards a sampled plan (TRL's reward_funcs), summed with "
                                         "reward_weights: " + REWARDS.described())
    reward_weights: tuple[float, ...] = Field(
        default=(), description="Each reward's weight, in `rewards` order (TRL's reward_weights; > 0); empty: 1 "
                                "each. Every reward is normalized within its group before the weighted sum")
    reward_settings: RewardSettings = Field(default_factory=RewardSettings,
                                            description="Each reward's own settings section, by reward name")
    unparseable_margin: float = Field(
        default=1.0, description="A plan that does not parse is rewarded this many standard deviations of its "
                                 "group's parseable rewards (or 1 reward unit when they are all equal) below the "
                                 "group's lowest parseable plan, before the group is normalized: it ranks last in "
                                 "every reward. The held-out reward places such plans the same way. At least 0.01")
    start: Literal["continue", "scratch"] = Field(
        default="continue", description="continue: from `policy`, rewarded by a reward model trained on every pair; "
                                        "scratch: from `scratch_policy`, rewarded by one trained on "
                                        "correct_over_incorrect pairs only (the loop retrains it so). Either way "
                                        "from the last promoted checkpoint of the same recipe, once there is one")
    policy: str = Field(default="smollm2-fewshot", description="The registry policy continued training starts from")
    scratch_policy: str = Field(default="smollm2-base", description="The registry policy a scratch round starts from")
    benchmark: str = Field(default="gsm8k", description="Problems the rounds train on (and hold out)")
    train_problems: int | None = Field(
        default=None, ge=1, description="Problems per round; each round takes the next ones. Unset: one per GRPO step "
                                        "(GRPO trains one problem's group a step, so it never takes more problems "
                                        "than steps: each one it rolls out is trained on)")
    group_size: int = Field(default=8, ge=2, description="Plans sampled per problem and step (GRPO's group)")
    micro_batch_size: int | None = Field(
        default=None, description="Plans per forward/backward pass; the group's gradients accumulate over "
                                  "group_size / micro_batch_size passes. Unset: each process's whole share of the "
                                  "group in one pass, so the group's prompt is forwarded once for all its plans")
    processes: int = Field(
        default=1, description="Data-parallel training processes of the round's method, started by `accelerate "
                               "launch` (NCCL, one per GPU; gloo on the CPU) with TRL's own multi-process support; "
                               "a step still trains on one group of group_size plans (each process "
                               "group_size / processes of them)")
    steps: int = Field(default=6, ge=1, description="Optimizer steps per round (one training problem's group per "
                                                    "step, the problems in turn)")
    learning_rate: float | None = Field(
        default=None, gt=0, description=f"AdamW learning rate; unset: {LORA_LEARNING_RATE:g} when LoRA adapters train "
                                        f"(measured to learn on the CPU, docs/learning.md), {FULL_LEARNING_RATE:g} "
                                        f"when every weight trains (not measured on a GPU here)")
    lr_scheduler: Literal["linear", "constant"] = Field(
        default="constant", description="How the learning rate moves over a round's steps: constant (a short round "
                                        "keeps its whole rate; measured to learn) or linear (decays to 0, TRL's "
                                        "default: a round of a few steps then moves less than half as far)")
    kl_beta: float = Field(default=0.0, ge=0, description="KL penalty towards the round's starting policy (0: off, "
                                                          "no reference forward, as in every round measured to learn; "
                                                          "MAS-Orchestra's 0.001 is a setting whose effect at this "
                                                          "size is not measured)")
    clip_epsilon: float = Field(default=0.2, description="PPO-style ratio clipping")
    temperature: float = Field(default=1.0, description="Sampling temperature of plans while training")
    max_completion_tokens: int = Field(
        default=200, ge=1, description="Token budget of a plan (the grammar fits it: one agent needs at least 200, "
                                       "two 324)")
    max_agents: int = Field(default=1, ge=1, description="Most sub-agents a plan may use (the grammar enforces it; "
                                                         "raise it with max_completion_tokens where decoding is cheap)")
    grammar: bool = Field(default=True, description="Constrain sampled plans to the plan grammar (the runner's "
                                                    "decoding, or vLLM's structured outputs); see "
                                                    "unparseable_margin for a plan that does not parse")
    lora: bool | None = Field(
        default=None, description="Train LoRA adapters (peft) instead of every weight; unset: LoRA on the CPU "
                                  "(a round there trains in minutes), every weight on a GPU")
    lora_rank: int = Field(default=16, description="LoRA rank")
    device: str = Field(default="auto", description="auto | cpu | cuda")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        default="auto", description="auto | fp32 | bf16: training precision (auto = bf16 mixed precision on a GPU "
                                    "that runs it natively, fp32 on the CPU)")
    activation_checkpointing: bool | None = Field(
        default=None, description="Recompute activations in the backward pass: less memory, ~20% slower, and the "
                                  "group's prompt is then forwarded once per plan (checkpointed layers keep no KV "
                                  "cache); unset: off")
    generation: Literal["auto", "transformers", "vllm_colocate", "vllm_server"] = Field(
        default="auto", description="How the trainer samples plans: transformers (the runner's batched decoding, CPU "
                                    "or GPU), or vLLM (colocated engine, or a `trl vllm-serve` server; GPU, gpu "
                                    "extra); the plan grammar constrains each of them. auto: transformers on every "
                                    "device, the path that has run. The vLLM modes have not run on a GPU here, and "
                                    "bench/gpu_check.sh does not check them yet")
    decoding_cache: DecodingCache = decoding_cache_field()
    vllm_server_url: str | None = Field(
        default=None, description="vllm_server: the base URL of TRL's weight-syncing server (`trl vllm-serve`, "
                                  "deploy/k8s/trl-vllm-serve.yaml: http://trl-vllm-serve.orchrm.svc:8000), not the "
                                  "sub-agents' OpenAI-compatible one")
    checkpoint_minutes: float | None = checkpoint_minutes_field()
    heldout_problems: int = Field(
        default=32, ge=1, description="Problems (the benchmark's last) no round trains on; the policy gate executes "
                                      "heldout_samples plans of each")
    heldout_samples: int = Field(
        default=3, ge=1, description="Plans sampled per held-out problem, fixed seeds. The gate pairs the sides "
                                     "problem by problem; 32 x 3 = 96 plans a side decide at least as often as the "
                                     "unpaired interval did at 32 x 4, at nominal coverage (bench/gate_interval.py, "
                                     "SIMULATED: 2,000 rounds a cell, docs/learning.md); fewer problems leave the gate "
                                     "undecided more often")
    reward_model: Literal["champion", "none"] = Field(
        default="champion", description="champion: the round loads its domain's champion reward model (it waits for "
                                        "one), which scores its held-out plans (held-out reward, calibration, "
                                        "hacking flag) and rewards plans where `rewards` says orchrm; none: an "
                                        "execution-only round, for a team without a reward model: no champion is "
                                        "waited for or loaded, `rewards` must reward by execution (trajectory), the "
                                        "held-out plans are executed and not scored (the gate decides on accuracy "
                                        "alone), and the loop trains no reward model and rolls nothing out")
    heldout_execute: bool = Field(default=True, description="Execute the held-out plans (in the execution's "
                                                            "environment) for the held-out accuracy the gate decides "
                                                            "on; off: the checkpoint is unverified")
    heldout_batch_size: int = Field(
        default=32, ge=1, description="Held-out plans decoded together (several problems' samples; each prompt "
                                      "forwarded once)")
    heldout_temperature: float = Field(default=0.5, description="Sampling temperature of held-out plans "
                                                                "(MAS-Orchestra evaluates at 0.5)")
    policy_gate: GateName = Field(
        default="accuracy", description="accuracy: a checkpoint is promoted only on measured held-out accuracy (not "
                                        "worse than its start's by more than accuracy_margin, at gate_confidence) "
                                        "and a held-out reward that did not fall; without measured accuracy it is "
                                        "unverified and not promoted. reward_only: without measured accuracy, "
                                        "promote on the held-out reward alone (measured accuracy is still tested)")
    accuracy_margin: float = Field(default=0.05, description="How far held-out accuracy may fall (non-inferiority "
                                                             "margin) for a checkpoint to be promoted")
    gate_confidence: float = Field(default=0.95, description="Confidence of the gate's intervals (two-sided; the "
                                                             "paired interval of the accuracy difference, problem by "
                                                             "problem, decides)")
    reward_hacking_share: float = Field(
        default=1.5, ge=0, le=5, description="Suspected reward hacking, rejected: the champion's held-out reward rose "
                                             "(paired by problem), its calibration (checked on runs it never saw) "
                                             "predicts an accuracy gain from the scores, and the upper bound of the "
                                             "measured gain is below this share of it (bench/hacking_flag.py chose "
                                             "it)")
    heldout_max_failed: int = Field(
        default=0, ge=0, description="Held-out plans a side may lose to a failure (decoding, execution or scoring "
                                     "raised) and still be a measurement; past it the round is unverified with the "
                                     "cause, never promoted or rejected on it, and the side is never reused. Below "
                                     "a side's plans (heldout_problems x heldout_samples). A plan that runs past its "
                                     "own time budget is no failure: it is an incorrect plan")
    policy_margin: float | None = Field(
        default=None, description="How far the held-out reward (the champion's mean score) may fall for a checkpoint "
                                  "to be promoted. Unset: it vetoes nothing where accuracy was measured (the reward "
                                  "model is what the round optimized: the measured accuracy decides), and may not "
                                  "fall at all under the reward_only gate")
    execution: ExecutionSettings = Field(default_factory=small_execution,
                                         description="Sub-agents for trajectory rewards and held-out execution")
    scoring: ScoringSettings = Field(default_factory=ScoringSettings, description="How the reward model scores")
    seed: int = Field(default=0, description="Seeds sampling and training")
    report_to: ReportTo = report_to_field()
    logging_dir: str | None = logging_dir_field()

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2: GRPO compares plans within a group")
        if self.micro_batch_size is not None and (self.micro_batch_size < 1
                                                  or self.group_size % self.micro_batch_size):
            raise ValueError("micro_batch_size must divide group_size")
        if self.processes > 1 and self.method == "rft":
            raise ValueError("rft samples and executes its plans before it trains, in one process: processes > 1 "
                             "is for grpo and dpo")
        if self.processes < 1 or (self.method == "grpo" and self.group_size % (self.micro_batch * self.processes)):
            raise ValueError(f"micro_batch_size x processes ({self.micro_batch} x {self.processes}) must divide "
                             f"group_size {self.group_size}: each process takes an equal share of a group")
        if min(self.steps, self.problems_per_round, self.heldout_problems, self.heldout_samples) < 1:
            raise ValueError("steps, train_problems, heldout_problems and heldout_samples must be >= 1")
        if self.method == "grpo" and self.problems_per_round > self.steps:
            raise ValueError(f"train_problems {self.train_problems} is more than steps {self.steps}: GRPO trains one "
                             f"problem's group a step, so problems {self.steps + 1}-{self.train_problems} would be "
                             f"rolled out and never trained on; raise steps, or leave train_problems unset (one a "
                             f"step)")
        if not self.rewards or len(set(self.rewards)) < len(self.rewards):
            raise ValueError("rewards must name at least one reward, each once")
        if self.reward_weights and (len(self.reward_weights) != len(self.rewards) or min(self.reward_weights) <= 0):
            raise ValueError("reward_weights must be empty or one weight > 0 per reward")
        if self.unparseable_margin < MIN_UNPARSEABLE_MARGIN:
            raise ValueError(f"unparseable_margin must be >= {MIN_UNPARSEABLE_MARGIN}")
        if not 0 < self.gate_confidence < 1 or self.accuracy_margin < 0:
            raise ValueError("gate_confidence must be in (0, 1), accuracy_margin >= 0")
        if self.reward_model == "none" and ("orchrm" in self.rewards or not self.heldout_execute
                                            or self.method == "dpo"):
            raise ValueError("reward_model none: a round without a reward model is rewarded by execution (rewards: "
                             "trajectory, not orchrm), trains by grpo or rft (dpo reads the reward model's pairs) and "
                             "is gated on executed held-out accuracy (heldout_execute on)")
        side = self.heldout_problems * self.heldout_samples
        if self.heldout_max_failed >= side:
            raise ValueError(f"heldout_max_failed {self.heldout_max_failed} must be below a side's "
                             f"{self.heldout_problems} x {self.heldout_samples} = {side} held-out plans: a side whose "
                             f"every plan failed measured nothing")

    @property
    def problems_per_round(self) -> int:
        """`train_problems`, or unset: one a step."""
        return self.train_problems or self.steps

    def learning_rate_on(self, device: str) -> float:
        """`learning_rate`, or unset: LoRA's or every weight's, as the round trains on `device`."""
        if self.learning_rate is not None:
            return self.learning_rate
        return LORA_LEARNING_RATE if self.uses_lora(device) else FULL_LEARNING_RATE

    @property
    def micro_batch(self) -> int:
        """Plans per pass: micro_batch_size, or each process's whole share of the group."""
        return self.micro_batch_size or max(1, self.group_size // max(1, self.processes))

    def generation_on(self, device: str) -> Literal["transformers", "vllm_colocate", "vllm_server"]:
        """`generation`, or auto: transformers on every device (the vLLM modes have not run on a GPU here)."""
        return "transformers" if self.generation == "auto" else self.generation

    def uses_lora(self, device: str) -> bool:
        """`lora`, or unset: on the CPU."""
        return device == "cpu" if self.lora is None else self.lora

    @property
    def gate_rule(self) -> GateRule:
        return GateRule(self.policy_gate, self.accuracy_margin, self.gate_confidence, self.policy_margin,
                        self.heldout_max_failed, self.reward_hacking_share)

    def training_logs(self, run_dir: str, checkpoint_subdir: str = "") -> TrainingLogs:
        """The logs of the round whose work folder (or published checkpoint) is `run_dir`: its run is named after
        the method and the round (grpo-r0001); by default they live in the checkpoint's folder and are published
        with it."""
        return training_logs(self.report_to, self.logging_dir, self.method, run_dir, checkpoint_subdir)

    @property
    def weights(self) -> tuple[float, ...]:
        return self.reward_weights or (1.0,) * len(self.rewards)

    @property
    def reward_label(self) -> str:
        """The combination of `rewards`, e.g. "orchrm+collaborative"."""
        return "+".join(self.rewards)

    @property
    def reward_mode(self) -> str:
        """What trained the policy, as the `reward_mode` columns store it: GRPO's reward combination, or what the
        round's method learns from (dpo: the reward model's pairs; rft: executed correctness)."""
        return METHODS.named(self.method).reward_mode(self)
