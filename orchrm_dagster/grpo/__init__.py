"""Policy rounds on the orchestrator: GRPO rewarded by the champion reward model (or by rollouts), or another
registered training method (DPO, RFT), and the policy checkpoints they publish."""

from orchrm_dagster.grpo.barrier import rollout_batches
from orchrm_dagster.grpo.checkpoints import (TOKEN_COLUMNS, round_tokens, base_model_dir, checkpoint_policies, policy_manifest,
                                             policy_name, read_table, round_name)
from orchrm_dagster.grpo.lineage import held_out_problems, recipe_problem, reward_model_sources, verified_checkpoints
from orchrm_dagster.grpo.methods import MethodContext, TrainingMethod, method_named, method_names, registered_methods
from orchrm_dagster.grpo.gate import (Accuracy, GateRule, GateVerdict, Measured, Reference, Reward,
                                      accuracy_difference, hacking_suspected, newcombe_difference, paired_difference,
                                      policy_gate)
from orchrm_dagster.grpo.heldout import HELD_OUT_PLANS_FILE, HeldOut, HeldOutMeasure, accuracy_key, held_out_key
from orchrm_dagster.grpo.plots import rounds_png, rounds_table
from orchrm_dagster.grpo.profile import Profile
from orchrm_dagster.grpo.rewards import (PlanReward, RewardContext, RewardKind, Rollouts, build_rewards,
                                         completion_text, group_rewards, held_out_rewards, reward_kinds, reward_named)
from orchrm_dagster.grpo.problems import round_problems
from orchrm_dagster.grpo.round import RoundOutcome, run_round, starting_policy
from orchrm_dagster.grpo.settings import (GRPOSettings, MethodName, MethodSettings, RewardName, RewardSettings,
                                          small_execution)

__all__ = [
    "rollout_batches",
    "Accuracy", "GateRule", "Reference", "accuracy_key", "newcombe_difference", "paired_difference",
    "HELD_OUT_PLANS_FILE", "HeldOutMeasure", "Measured", "Reward", "hacking_suspected",
    "held_out_key", "TOKEN_COLUMNS", "round_tokens", "accuracy_difference", "rounds_table",
    "GateVerdict", "GRPOSettings", "HeldOut", "MethodContext", "MethodName", "MethodSettings", "PlanReward", "Profile", "RewardContext", "RewardKind", "RewardName",
    "RewardSettings", "RoundOutcome", "Rollouts", "base_model_dir", "checkpoint_policies", "completion_text",
    "build_rewards", "group_rewards", "held_out_rewards", "reward_kinds", "reward_named", "TrainingMethod",
    "method_named", "method_names",
    "registered_methods",
    "policy_manifest", "policy_name", "read_table", "round_name", "round_problems", "rounds_png",
    "policy_gate", "recipe_problem", "reward_model_sources", "held_out_problems", "verified_checkpoints", "run_round", "small_execution", "starting_policy",
]
