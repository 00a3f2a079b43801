import dagster as dg

from assets.deployment import WAREHOUSE_STEP
from assets.partitions import run_batches
from assets.resources import RunDefaultsResource, StorageResource
from assets.run_configs import LabelConfig, run_settings
from orchrm_dagster.labels import LABEL_SOURCES, REFERENCE_SOURCE, RUN_SOURCE, label_batch, unparsed_note
from orchrm_dagster.problems import problem_table, reference_answers
from orchrm_dagster.reporting import markdown_table
from orchrm_dagster.rm import plan_parses


@dg.asset(partitions_def=run_batches, deps=["runs", "problems"], group_name="labels", kinds={"parquet", "duckdb"},
          **WAREHOUSE_STEP)
def labels(context: dg.AssetExecutionContext, config: LabelConfig, storage: StorageResource,
           run_defaults: RunDefaultsResource):
    """Correctness of each run's final answer: math-verify, QA exact match / F1, or option letter, against the
    reference answer; where there is none, the run's own is_correct if its benchmark is in trust_run_labels
    (labels.label_source says which). Runs left unlabeled, and labeled runs whose plan does not parse, are counted,
    with what to do."""
    root = storage.storage_root()
    references = reference_answers(problem_table(root, ["problem_id", "answer", "answer_type", "choices"]))
    report = label_batch(root, context.partition_key, references,
                         run_settings(context, config, run_defaults.to_engine().labels), plan_parses=plan_parses)
    storage.warehouse().refresh_views(("labels",))
    accuracy = report.correct / report.labeled if report.labeled else 0.0
    if report.unlabeled:
        context.log.warning(report.unlabeled_hint())
    if report.unparsed_plans:
        context.log.warning(unparsed_note(report.unparsed_plans))
    return dg.MaterializeResult(metadata={
        "dagster/row_count": report.labeled,
        "accuracy": round(accuracy, 4),
        "labeled_by_reference": report.by_source[REFERENCE_SOURCE],
        "labeled_by_run": report.by_source[RUN_SOURCE],
        "unlabeled_runs": report.unlabeled,
        "unlabeled": report.unlabeled_hint() or "none: every run has a label",
        "runs_without_reference": report.without_reference,
        "unparsed_plans": report.unparsed_plans,
        "failed_runs_without_verdict": report.failed_runs,
        "producer_verdicts": report.producer_verdicts,
        "producer_disagreements": report.disagreements,
        "labels_per_second": round(report.runs / report.seconds, 1) if report.seconds else 0.0,
        "by_source": dg.MetadataValue.md(markdown_table(["label source", "runs"], [
            (source, report.by_source[source]) for source in LABEL_SOURCES])),
        "by_labeler": dg.MetadataValue.md(markdown_table(["labeler", "runs"], report.by_labeler.most_common())),
        "incorrect_reasons": dg.MetadataValue.md(
            markdown_table(["reason", "runs"], report.reasons.most_common(15)) if report.reasons else "none"),
    })
