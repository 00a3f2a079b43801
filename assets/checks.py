import warnings

import dagster as dg

import sql
from assets.partitions import run_batches
from assets.resources import StorageResource
from assets.run_configs import PairChecksConfig, QuarantineCheckConfig
from orchrm_dagster.pairs import load_rules, mix_within_tolerance
from orchrm_dagster.reporting import markdown_table


@dg.asset_check(asset="runs", description="No run_id appears twice across all batches.")
def run_ids_unique(storage: StorageResource) -> dg.AssetCheckResult:
    duplicates = storage.warehouse().query(sql.load("check_duplicate_run_ids")).to_pylist()
    return dg.AssetCheckResult(
        passed=not duplicates,
        metadata={"duplicated_run_ids": len(duplicates),
                  "examples": dg.MetadataValue.md(markdown_table(
                      ["run_id", "copies", "batches"], [tuple(d.values()) for d in duplicates]) if duplicates else "none")},
    )


# Checks per run batch need partitioned asset checks, a Dagster preview feature: its warning is known.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning)


@dg.asset_check(asset="labels", partitions_def=run_batches,
                description="Every run of the batch that has a reference answer has a label.")
def every_referenced_run_labeled(context: dg.AssetCheckExecutionContext, storage: StorageResource):
    batch_id = context.partition_key
    (unlabeled,) = storage.warehouse().query(sql.load("check_unlabeled_runs"), {"batch_id": batch_id}).to_pylist()[0].values()
    return dg.AssetCheckResult(passed=unlabeled == 0, metadata={"unlabeled_runs": unlabeled})


def batch_check_metadata(state) -> dict:
    """The `batch_ingested` check's metadata for a batch (a loop.BatchState): its file(s), its state, and the cause
    of a failure, with each file its ingest could not read."""
    metadata = {"file": state.name, "state": state.state, "cause": state.cause}
    if state.failed_files:
        metadata["failed_files"] = dg.MetadataValue.md(markdown_table(["file", "cause"], list(state.failed_files)))
    return metadata


@dg.asset_check(asset="runs", name="batch_ingested", partitions_def=run_batches,
                description="The landed files of this batch are ingested and labeled as they are now. The loop's "
                            "sensor reports it failed, with the cause, when the batch's ingest failed or one of its "
                            "files could not be read (each such file named, with why), and passed once it is "
                            "re-ingested; a failed batch or file holds nothing else.")
def batch_ingested(context: dg.AssetCheckExecutionContext, storage: StorageResource):
    from assets.loop import loop_state
    from orchrm_dagster.loop import batch_states

    states = [s for s in batch_states(loop_state(context.instance, storage.storage_root()))
              if s.batch_id == context.partition_key]
    if not states:
        return dg.AssetCheckResult(passed=False, metadata={"state": "not in the landing zone", "cause": ""})
    return dg.AssetCheckResult(passed=states[0].state == "ingested", metadata=batch_check_metadata(states[0]))


@dg.asset_check(asset="quarantine", partitions_def=run_batches,
                description="Share of a batch's lines that went to quarantine, warned above a threshold.")
def quarantine_rate(context: dg.AssetCheckExecutionContext, config: QuarantineCheckConfig, storage: StorageResource):
    batch_id = context.partition_key
    row = storage.warehouse().query(sql.load("check_quarantine_rate"), {"batch_id": batch_id}).to_pylist()[0]
    lines = row["quarantined"] + row["landed"]
    rate = row["quarantined"] / lines if lines else 0.0
    return dg.AssetCheckResult(
        passed=rate <= config.warn_rate,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"quarantine_rate": round(rate, 4), "quarantined": row["quarantined"], "lines": lines,
                  "warn_rate": config.warn_rate},
    )


@dg.asset_check(asset="pairs", description="No pair repeats a plan pair (within an environment) or a pair_id, and "
                                          "no pair sets a plan against itself.")
def pairs_unique(storage: StorageResource) -> dg.AssetCheckResult:
    row = storage.warehouse().query(sql.load("check_pairs_duplicates")).to_pylist()[0]
    return dg.AssetCheckResult(passed=not any(row.values()), metadata=row)


@dg.asset_check(asset="pairs", description="No problem has pairs in both the train and validation splits.")
def pairs_split_by_problem(storage: StorageResource) -> dg.AssetCheckResult:
    (overlap,) = storage.warehouse().query(sql.load("check_pairs_split_overlap")).to_pylist()[0].values()
    return dg.AssetCheckResult(passed=overlap == 0, metadata={"problems_in_both_splits": overlap})


@dg.asset_check(asset="pairs", description="The specialized-over-base : correct-over-incorrect mix is within "
                                          "tolerance of the configured one (when both sources had enough pairs).")
def pairs_mix_ratio(config: PairChecksConfig, storage: StorageResource) -> dg.AssetCheckResult:
    rules = load_rules(storage.storage_root())
    counts = {r["source"]: r["pairs"] for r in storage.warehouse().query(sql.load("pairs_by_source")).to_pylist()}
    result = mix_within_tolerance(counts, rules.mix_specialized, rules.mix_correct, config.mix_tolerance)
    return dg.AssetCheckResult(passed=result.passed, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"pairs_by_source": dg.MetadataValue.json(counts),
                                         "specialized_share": result.share, "wanted_share": result.wanted,
                                         "note": result.note})


@dg.asset_check(asset="reward_model", blocking=True,
                description="Some domain has a champion, and each champion's validation accuracy on its domain beat "
                            "chance significantly (at least min_validation_pairs pairs, one-sided binomial test at "
                            "champion_level). Blocking: when it fails, nothing after reward_model in the run goes on.")
def champion_beats_chance(storage: StorageResource) -> dg.AssetCheckResult:
    from orchrm_dagster.rm import champion_standings

    standings = champion_standings(storage.storage_root())
    champions = [s for s in standings if s.champion is not None]
    passed = bool(champions) and all(s.beats_chance for s in champions)
    return dg.AssetCheckResult(
        passed=passed, description=None if passed else champion_refusal(standings),
        metadata={"champions": len(champions),
                  "domains": dg.MetadataValue.md(markdown_table(
                      ["domain", "champion", "val accuracy", "validation pairs", "p (vs chance)", "why not"],
                      [(s.domain, s.champion, s.accuracy, s.pairs_shown, s.p_value, s.problem)
                       for s in standings]))})


def champion_refusal(standings) -> str:
    """Why the champion check failed, whole: each domain whose champion falls short, or, with no champion at all,
    why each domain has none (what the failed step's line says)."""
    champions = [s for s in standings if s.champion is not None]
    failing = [s for s in champions if not s.beats_chance] or [s for s in standings if s.champion is None]
    return "; ".join(f"{s.domain}: {s.problem}" for s in failing)


@dg.asset_check(asset="evaluation", description="No problem of the latest evaluation appears in a pair (train or "
                                                "validation) that the reward-model champion of its domain saw.")
def evaluation_held_out(storage: StorageResource) -> dg.AssetCheckResult:
    from orchrm_dagster.rm import pair_problems

    rows = storage.warehouse().query(sql.load("evaluation_latest_problems")).to_pylist()
    if not rows:
        return dg.AssetCheckResult(passed=True, metadata={"note": "no evaluation problems yet"})
    # each problem against the pairs of the version that scored it: its domain's champion
    leaked = []
    for version in sorted({r["rm_version"] for r in rows if r["rm_version"] is not None}):
        seen = pair_problems(storage.storage_root(), version)
        if seen is None:
            return dg.AssetCheckResult(passed=False, metadata={"note": f"reward model v{version} did not record the "
                                                                       "problems of its pairs: held-out not provable"})
        leaked += sorted({r["problem_id"] for r in rows if r["rm_version"] == version} & seen)
    return dg.AssetCheckResult(passed=not leaked, metadata={
        "evaluation_id": rows[0]["evaluation_id"], "problems": len(rows), "leaked_problems": len(leaked),
        "examples": ", ".join(leaked[:10]) or "none"})
