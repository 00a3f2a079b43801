"""The code location's jobs, each under a name the loop asks for (assets/loop.py maps each kind of step to one)."""

import dagster as dg

from assets.partitions import grpo_rounds, orchestration_partitions, run_batches

# Everything one landed batch needs, in one run per batch: ingestion, labels and their checks.
INGEST_JOB = "ingest_run_batch"
ingest_run_batch_job = dg.define_asset_job(
    INGEST_JOB,
    # batch_ingested is the loop's verdict on the whole step, reported by its sensor: not a check of the run itself
    selection=dg.AssetSelection.assets("runs", "subagent_calls", "quarantine", "labels")
    - dg.AssetSelection.checks(dg.AssetCheckKey(dg.AssetKey("runs"), "batch_ingested")),
    partitions_def=run_batches,
    description="Ingest and label one landed run batch (a run_batches partition).",
)

# Sample plans from one policy on one benchmark and execute them; the landed batch is then ingested.
ORCHESTRATE_JOB = "orchestrate"
orchestrate_job = dg.define_asset_job(
    ORCHESTRATE_JOB,
    selection=dg.AssetSelection.assets("orchestration_samples", "execution_artifacts"),
    partitions_def=orchestration_partitions,
    description="Sample orchestration plans for a (benchmark, policy) partition and execute them.",
)


def _job_of(name: str, asset: str, description: str, partitions_def=None):
    """A job that materializes one asset."""
    return dg.define_asset_job(name, selection=dg.AssetSelection.assets(asset), partitions_def=partitions_def,
                               description=description)


# The pairs, rebuilt from every ingested batch; the loop asks for it when the ingested batches changed.
PAIRS_JOB = "rebuild_pairs"
rebuild_pairs_job = _job_of(PAIRS_JOB, "pairs", "Rebuild the win-lose pairs from every ingested, labeled batch.")

# One GRPO round (a grpo_rounds partition); the loop asks for it.
ROUND_JOB = "grpo_round_job"
grpo_round_job = _job_of(ROUND_JOB, "grpo_round", "Train the next policy checkpoint with GRPO against the champion "
                                                  "reward model.", grpo_rounds)

# A challenger trains on the current pairs; the loop asks for it once enough new pairs arrived (and then for scores,
# if the champion changed).
RETRAIN_JOB = "retrain_reward_model"
retrain_reward_model_job = _job_of(RETRAIN_JOB, "reward_model", "Train a challenger on the current pairs; the champion "
                                                                "gate decides whether it replaces the champion.")

# Every run batch the champion has not scored as it is now; the loop asks for it.
SCORES_JOB = "score_runs"
score_runs_job = _job_of(SCORES_JOB, "rm_scores", "Score the runs the champion reward model has not scored yet.")

# The Best-of-N evaluation; the nightly schedule runs it.
evaluation_job = _job_of("evaluation_job", "evaluation",
                         "Evaluate every way of choosing among N runs on held-out problems.")

LOOP_JOBS = [ingest_run_batch_job, rebuild_pairs_job, retrain_reward_model_job, score_runs_job]
ROUND_JOBS = [orchestrate_job, grpo_round_job]
