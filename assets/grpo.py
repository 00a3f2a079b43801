import dagster as dg

from assets.deployment import POLICY_STEP
from assets.partitions import grpo_rounds
from assets.resources import LLMBackendResource, LoopResource, PolicyRegistry, StorageResource
from assets.run_configs import GRPORoundConfig, run_settings
from assets.training_logs import training_logs_metadata
from assets.training_process import TrainingProcessResource, training_gpus
from orchrm_dagster.environments import environment_label
from orchrm_dagster.grpo import TOKEN_COLUMNS, Profile, RoundOutcome, read_table, round_tokens, rounds_png, rounds_table
from orchrm_dagster.reporting import markdown_image, markdown_table
from orchrm_dagster.rm import Calibration
from orchrm_dagster.training_jobs import grpo_round_request


@dg.asset(partitions_def=grpo_rounds, deps=["reward_model", "problems"], group_name="grpo",
          kinds={"pytorch", "parquet"}, **POLICY_STEP)
def grpo_round(context: dg.AssetExecutionContext, config: GRPORoundConfig, storage: StorageResource,
               llm: LLMBackendResource, policy_registry: PolicyRegistry, training: TrainingProcessResource,
               loop: LoopResource):
    """One round of training the orchestrator policy with the config's `method`: GRPO (TRL's GRPOTrainer) rewarded
    by the config's `rewards` (by default the champion reward model's score of each sampled plan), DPO on the
    champion's pairs, or RFT on the policy's own correct plans: a new policy checkpoint (a policy of kind
    `checkpoint` from then on) and a `grpo_rounds` row with the method, reward, KL, every token it spent, and the
    policy gate's verdict on measured held-out accuracy (executed in the config's environment) and held-out reward,
    before and after, with their intervals. The round runs in a process of its own (Dagster Pipes)."""
    root = storage.storage_root()
    settings = run_settings(context, config, loop.to_engine().round)
    request = grpo_round_request(storage.to_engine(), int(context.partition_key), settings,
                                 policy_registry.all_policies(root), llm.to_engine())
    result = training.run(context, "grpo_round", request, gpus=training_gpus(settings.device, settings.processes))
    outcome = RoundOutcome.from_json(result["outcome"])
    storage.warehouse().refresh_views(("policy_checkpoints", "grpo_rounds"))
    rows = read_table(root, "grpo_rounds")
    row = outcome.row
    headers, table = rounds_table(rows)
    return dg.MaterializeResult(metadata={
        "policy": outcome.policy,
        "training_process": f"{training.chosen_launcher()} (Dagster Pipes), pid {result['pid']}",
        "checkpoint": outcome.path,
        **training_logs_metadata([settings.training_logs(outcome.path)] if outcome.path else []),
        **{key: row[key] for key in ("method", "rm_version", "steps", *TOKEN_COLUMNS)},
        "total_tokens": round_tokens(row),
        **{key: round(row[key], 4) if row[key] is not None else None
           for key in ("mean_reward", "kl", "heldout_reward_before", "heldout_reward_after", "heldout_accuracy_before",
                       "heldout_accuracy")},
        **{key: row[key] for key in ("heldout_failed_before", "heldout_failed_after", "heldout_failure_before",
                                     "heldout_failure_after", "heldout_predicted_accuracy_before",
                                     "heldout_predicted_accuracy_after") if row[key] is not None},
        "calibration": Calibration.from_json(row["calibration"]).text() if row["calibration"] else "none",
        "environment": environment_label(row["environment"]),
        "truth": row["truth"] or "none: real sub-agents",
        "verdict": row["verdict"],
        "gate": row["gate"],
        "reward_hacking": row["reward_hacking"],
        "hacking_flag": row.get("hacking_flag") or "not recorded",
        **({"held_against": f"{row['best_policy']} ({row['best_accuracy']:.3f}), the best accuracy in use, "
                            f"difference [{row['best_difference_low']:+.3f}, {row['best_difference_high']:+.3f}]"}
           if row.get("best_policy") and row.get("best_difference_low") is not None else {}),
        "difference_method": row.get("difference_method") or "none",
        "promoted": row["promoted"],
        "reason": row["reason"],
        "seconds": round(row["seconds"], 1),
        "seconds_by_phase": dg.MetadataValue.md(Profile(dict(outcome.profile)).markdown()),
        "rounds": dg.MetadataValue.md(markdown_table(headers, table)),
        "over_rounds": dg.MetadataValue.md(markdown_image(rounds_png(rows),
                                                          "reward, KL, held-out reward and accuracy over rounds")),
    })


@dg.asset_check(asset="grpo_round", description="The latest round was not flagged as suspected reward hacking: the "
                                                "champion's calibration predicted an accuracy gain from its held-out "
                                                "scores that the measured accuracy fell well short of (such a "
                                                "checkpoint is never promoted).")
def no_reward_hacking(storage: StorageResource) -> dg.AssetCheckResult:
    rows = read_table(storage.storage_root(), "grpo_rounds")
    flagged = [r for r in rows if r["reward_hacking"]]
    latest = rows[-1] if rows else None
    return dg.AssetCheckResult(passed=not (latest and latest["reward_hacking"]), metadata={
        "latest_round": latest["round"] if latest else None,
        "latest_flag": (latest.get("hacking_flag") or "not recorded") if latest else "no round",
        "flagged_rounds": dg.MetadataValue.md(markdown_table(
            ["round", "environment", "reason"], [(r["round"], r["environment"], r["reason"]) for r in flagged])
            if flagged else "none")})
