import dagster as dg

from orchrm_dagster.glue.loop import (INGEST_JOB, ORCHESTRATE_JOB, PAIRS_JOB, RETRAIN_JOB, ROUND_JOB, SCORES_JOB)
from orchrm_dagster.glue.partitions import grpo_rounds, orchestration_partitions, run_batches

# Everything one landed batch needs, in one run per batch: ingestion, labels and their checks.
ingest_run_batch_job = dg.define_asset_job(
    INGEST_JOB,
    # batch_ingested is the loop's verdict on the whole step, reported by its sensor: not a check of the run itself
    selection=dg.AssetSelection.assets("runs", "subagent_calls", "quarantine", "labels")
    - dg.AssetSelection.checks(dg.AssetCheckKey(dg.AssetKey("runs"), "batch_ingested")),
    partitions_def=run_batches,
    description="Ingest and label one landed run batch (a run_batches partition).",
)

# Sample plans from one policy on one benchmark and execute them; the landed batch is then ingested.
orchestrate_job = dg.define_asset_job(
    ORCHESTRATE_JOB,
    selection=dg.AssetSelection.assets("orchestration_samples", "execution_artifacts"),
    partitions_def=orchestration_partitions,
    description="Sample orchestration plans for a (benchmark, policy) partition and execute them.",
)

# The pairs, rebuilt from every ingested batch; the loop asks for it when the ingested batches changed.
rebuild_pairs_job = dg.define_asset_job(
    PAIRS_JOB, selection=dg.AssetSelection.assets("pairs"),
    description="Rebuild the win-lose pairs from every ingested, labeled batch.")

# One GRPO round (a grpo_rounds partition); the loop asks for it.
grpo_round_job = dg.define_asset_job(
    ROUND_JOB, selection=dg.AssetSelection.assets("grpo_round"), partitions_def=grpo_rounds,
    description="Train the next policy checkpoint with GRPO against the champion reward model.")

# A challenger trains on the current pairs; the loop asks for it once enough new pairs arrived (and then for scores,
# if the champion changed).
retrain_reward_model_job = dg.define_asset_job(
    RETRAIN_JOB, selection=dg.AssetSelection.assets("reward_model"),
    description="Train a challenger on the current pairs; the champion gate decides whether it replaces the champion.")

# Every run batch the champion has not scored as it is now; the loop asks for it.
score_runs_job = dg.define_asset_job(
    SCORES_JOB, selection=dg.AssetSelection.assets("rm_scores"),
    description="Score the runs the champion reward model has not scored yet.")

# The Best-of-N evaluation; the nightly schedule runs it.
evaluation_job = dg.define_asset_job(
    "evaluation_job", selection=dg.AssetSelection.assets("evaluation"),
    description="Evaluate every way of choosing among N runs on held-out problems.")

LOOP_JOBS = [ingest_run_batch_job, rebuild_pairs_job, retrain_reward_model_job, score_runs_job]
ROUND_JOBS = [orchestrate_job, grpo_round_job]
