import dagster as dg

from assets.partitions import grpo_rounds, orchestration_partitions, run_batches

# Everything one landed batch needs, in one run per batch: ingestion, labels and their checks.
ingest_run_batch_job = dg.define_asset_job(
    "ingest_run_batch",
    selection=dg.AssetSelection.assets("runs", "subagent_calls", "quarantine", "labels"),
    partitions_def=run_batches,
    description="Ingest and label one landed run batch (a run_batches partition).",
)

# Sample plans from one policy on one benchmark and execute them; the landed batch is then ingested.
orchestrate_job = dg.define_asset_job(
    "orchestrate",
    selection=dg.AssetSelection.assets("orchestration_samples", "execution_artifacts"),
    partitions_def=orchestration_partitions,
    description="Sample orchestration plans for a (benchmark, policy) partition and execute them.",
)

# One GRPO round (a grpo_rounds partition); the loop sensor requests it.
grpo_round_job = dg.define_asset_job(
    "grpo_round_job", selection=dg.AssetSelection.assets("grpo_round"), partitions_def=grpo_rounds,
    description="Train the next policy checkpoint with GRPO against the champion reward model.")

# The reward model retrains and the runs are scored again; the retrain sensor requests it.
retrain_reward_model_job = dg.define_asset_job(
    "retrain_reward_model", selection=dg.AssetSelection.assets("reward_model", "rm_scores"),
    description="Train a challenger on the current pairs (the champion gate decides) and score every run.")

# The Best-of-N evaluation; the nightly schedule runs it.
evaluation_job = dg.define_asset_job(
    "evaluation_job", selection=dg.AssetSelection.assets("evaluation"),
    description="Evaluate every way of choosing among N runs on held-out problems.")
