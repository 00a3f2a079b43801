import dagster as dg

from assets.deployment import MODEL_STEP, WAREHOUSE_STEP
from assets.resources import LoopResource, RunDefaultsResource, StorageResource
from assets.run_configs import PairsConfig, RewardModelConfig, ScoringConfig, run_settings
from assets.training_logs import training_logs_metadata
from assets.training_process import TrainingProcessResource, training_gpus
from orchrm_dagster.pairs import PairContext, PairRules, build_pairs_table
from orchrm_dagster.reporting import markdown_image, markdown_table
from orchrm_dagster.storage import StorageRoot
from orchrm_dagster.training_jobs import reward_model_request


@dg.asset(deps=["runs", "labels"], group_name="reward_model", kinds={"duckdb", "parquet", "polars"},
          **WAREHOUSE_STEP)
def pairs(context: dg.AssetExecutionContext, config: PairsConfig, storage: StorageResource,
          run_defaults: RunDefaultsResource):
    """Deduplicated win-lose plan pairs (specialized-over-base, correct-over-incorrect), split by problem, each
    pair's two runs from one environment. Only `specialized` policies and checkpoints this root promoted on measured
    held-out accuracy win specialized-over-base pairs; imported pairs take the id of the problem their question
    matches, and those on a held-out problem are left out."""
    root, rules = storage.storage_root(), run_settings(context, config, run_defaults.to_engine().pairs)
    outcome = build_pairs_table(root, storage.warehouse(), rules, pair_context(root, rules))
    storage.warehouse().refresh_views(("pairs", "imported_pairs"))
    live = record_live(root)
    for line in outcome.import_rejections[:20]:
        context.log.warning(f"imported pair skipped: {line}")
    for line in outcome.held_out_examples:
        context.log.warning(f"imported pair left out, its problem is held out: {line}")
    stats = outcome.stats
    rows = [(source, splits.get("train", 0), splits.get("validation", 0)) for source, splits in stats.pairs.items()]
    return dg.MaterializeResult(metadata={
        "dagster/row_count": stats.total,
        "by_source": dg.MetadataValue.md(markdown_table(["source", "train", "validation"], rows)),
        "policies": dg.MetadataValue.md(markdown_table(
            ["policy", "kind", "runs", "specialized-over-base side"],
            [(p.name, p.kind, p.runs, p.side) for p in stats.policies])),
        "candidates_before_caps": dg.MetadataValue.json(stats.candidates),
        "conflicts_dropped": stats.conflicts,
        "identical_plans_skipped": stats.identical_plans_skipped,
        "problems_with_pairs": stats.problems_with_pairs,
        "imported_pairs": outcome.imported,
        "imported_matched_to_problems": outcome.imported_matched,
        "imported_left_out_held_out": outcome.imported_held_out,
        "seconds": round(stats.seconds, 3),
        **live,
    })


def scores_exported(context, storage: StorageResource, settings, champions: dict) -> dict:
    """With `ingest.traces.export_scores.after_scoring`, the imported runs' labels and new scores sent back to their
    tools (`orchrm export-scores`); its metadata. An export that fails leaves the scores written: the log and the
    metadata say why, and the next scoring (or `orchrm export-scores`) sends what is left."""
    if not settings.after_scoring:
        return {}
    from orchrm_dagster.rm import domain_of
    from orchrm_dagster.storage import LockTimeout
    from orchrm_dagster.traces import ScoreExportFailed, export_scores

    try:
        report = export_scores(storage.storage_root(), settings, champions=champions, domain_of=domain_of)
    except (ScoreExportFailed, LockTimeout) as err:  # LockTimeout: another export held the lock too long
        context.log.error(f"the scores were not all exported: {err}")
        return {"scores_exported": f"failed: {err}"}
    finally:
        storage.warehouse().refresh_views(("score_exports",))
    return {"scores_exported": dg.MetadataValue.md(markdown_table(
        ["tool", "runs sent", "unchanged", "to"],
        [(p.tool, p.runs, p.unchanged, p.destination if p.pushed else ", ".join(p.files) or p.destination)
         for p in report.tools]))}


def record_live(root: StorageRoot) -> dict:
    """The champions' live accuracy on the pairs they never trained on, added to its series (`pairs` and `rm_scores`
    each may complete the measure); its metadata."""
    from orchrm_dagster.rm import current_champions
    from orchrm_dagster.rm import pairs_live_accuracy, read_live_accuracy, record_live_accuracy
    from orchrm_dagster.rm import live_accuracy_png

    champions = current_champions(root)
    measures = pairs_live_accuracy(root, champions) if champions else []
    record_live_accuracy(root, measures)
    series = read_live_accuracy(root)
    plot = ({"live_accuracy_over_time": dg.MetadataValue.md(markdown_image(
        live_accuracy_png(series), "the champions' live accuracy over time"))} if series.height else {})
    return plot | {"champion_live_accuracy": dg.MetadataValue.md(markdown_table(
        ["domain", "champion", "new pairs", "ranked right", "95% interval", "validation accuracy"],
        [(m.domain, m.rm_version, m.pairs, m.accuracy, m.interval(), m.validation_accuracy) for m in measures]))
            if measures else "no champion yet"}


def pair_context(root: StorageRoot, rules: PairRules) -> PairContext:
    """What the pairs build is told: the checkpoints verified on measured accuracy (from the rounds), and, when
    pairs are imported, the shipped benchmarks' problems and the problems held out."""
    from orchrm_dagster.grpo import held_out_problems, read_table, verified_checkpoints
    from orchrm_dagster.problems import SHIPPED_BENCHMARKS, load_shipped

    verified = verified_checkpoints(read_table(root, "grpo_rounds"))
    if not rules.import_files:
        return PairContext(verified_checkpoints=verified)
    shipped = tuple((p["problem_id"], p["question"]) for name in SHIPPED_BENCHMARKS for p in load_shipped(name))
    return PairContext(verified, shipped, held_out_problems(root))


@dg.asset(deps=["pairs"], group_name="reward_model", kinds={"pytorch", "python"}, **MODEL_STEP)
def reward_model(context: dg.AssetExecutionContext, config: RewardModelConfig, storage: StorageResource,
                 training: TrainingProcessResource, loop: LoopResource):
    """Bradley-Terry reward models trained on the pairs: new checkpoint versions (one shared model, or one per
    domain), each champion of the domains (math, qa, choice) where its validation accuracy beats chance (at least
    min_validation_pairs pairs, a one-sided binomial test) and is as good as that domain's champion's. The training
    runs in a process of its own (Dagster Pipes), in `processes` data-parallel processes."""
    from orchrm_dagster.rm import TrainingOutcome, checkpoint_table

    root, settings = storage.storage_root(), run_settings(context, config, loop.to_engine().reward_model)
    result = training.run(context, "reward_model", reward_model_request(storage.to_engine(), settings),
                          gpus=training_gpus(settings.device, settings.processes))
    outcomes = [TrainingOutcome.from_json(outcome) for outcome in result["outcomes"]]
    storage.warehouse().refresh_views(("rm_checkpoints",))
    versions = checkpoint_table(root).to_pylist()
    champion_now = {d: r["version"] for r in versions for d in r["champion_of"]}
    return dg.MaterializeResult(metadata={
        "trained_versions": [o.version for o in outcomes],
        # the pairs each version trained and validated on, saved beside it (the `rm_training_pairs` view)
        "training_pairs": {str(o.version): {"path": o.training_pairs, "train_rows": o.train_pairs,
                                            "validation_rows": o.validation_pairs,
                                            "pair_set_fingerprint": o.pair_set_fingerprint} for o in outcomes},
        "retrained_from": settings.retrain_from_version,
        # what each training was estimated to need before it loaded anything, against the device's memory
        "memory_estimate": {str(o.version): o.memory.get("message") for o in outcomes if o.memory},
        "champion_of": {str(o.version): list(o.champion_of) for o in outcomes},
        **training_logs_metadata([settings.training_logs(o.path) for o in outcomes]),
        "training_process": f"{training.chosen_launcher()} (Dagster Pipes), pid {result['pid']}, {settings.processes} "
                            f"data-parallel process(es)",
        "seconds_training": {str(o.version): round(o.seconds, 1) for o in outcomes},
        "champions": dg.MetadataValue.md(markdown_table(
            ["domain", "champion", "trained", "its accuracy", "pairs judged on", "p (vs chance)", "previous champion",
             "its accuracy", "why not crowned"],
            [(d, champion_now.get(d), o.version, v.accuracy, v.pairs, v.p_value, v.champion, v.champion_accuracy,
              v.refusal) for o in outcomes for d, v in o.verdicts.items()])),
        "trained": dg.MetadataValue.md(markdown_table(
            ["version", "stands for", "train pairs", "validation pairs", "val acc", "ece", "length spearman",
             "pairs/s", "checkpoint"],
            [(o.version, ", ".join(o.domains), o.train_pairs, o.validation_pairs, o.metrics.get("val_accuracy"),
              o.metrics.get("ece"), o.metrics.get("length_spearman"), round(o.pairs_per_second, 2), o.path)
             for o in outcomes])),
        "accuracy_by_source": dg.MetadataValue.md(markdown_table(
            ["version", "source", "accuracy"],
            [(o.version, source, accuracy) for o in outcomes
             for source, accuracy in sorted((o.metrics.get("accuracy_by_source") or {}).items())])),
        "versions": dg.MetadataValue.md(markdown_table(
            ["version", "domains", "champion of", "val acc", "val acc by domain", "pairs"],
            [(r["version"], ", ".join(r["domains"]), ", ".join(r["champion_of"]), r["val_accuracy"],
              r["val_accuracy_by_domain"], r["n_train_pairs"]) for r in versions])),
    })


@dg.asset(deps=["reward_model", "runs"], group_name="reward_model", kinds={"pytorch", "parquet"},
          **MODEL_STEP)
def rm_scores(context: dg.AssetExecutionContext, config: ScoringConfig, storage: StorageResource,
              run_defaults: RunDefaultsResource):
    """Every ingested run's score by the champion of its domain (run batches already scored so are kept)."""
    from orchrm_dagster.rm import score_runs

    report = score_runs(storage.storage_root(), run_settings(context, config, run_defaults.to_engine().scoring))
    storage.warehouse().refresh_views(("rm_scores",))
    live = record_live(storage.storage_root())
    exported = scores_exported(context, storage, run_defaults.to_engine().ingest.traces.export_scores,
                               report.champions)
    return dg.MaterializeResult(metadata={
        "champions": report.champions,
        "runs_by_domain": report.runs_by_domain,
        "runs_without_champion": report.runs_without_champion,
        "refused": dg.MetadataValue.md(markdown_table(["domain", "why its runs are not scored"],
                                                      sorted(report.refused.items())) if report.refused else "none"),
        "runs_scored": report.runs_scored,
        "batches_scored": report.batches_scored,
        "batches_already_current": report.batches_current,
        "plans_per_second": round(report.runs_scored / report.seconds, 1) if report.seconds else 0.0,
        **live,
        **exported,
    })
