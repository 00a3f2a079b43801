import dagster as dg

from assets.deployment import WAREHOUSE_STEP
from assets.partitions import run_batches
from assets.resources import StorageResource
from assets.run_configs import LabelConfig
from orchrm_dagster.labels import label_batch
from orchrm_dagster.problems import problem_table, reference_answers
from orchrm_dagster.reporting import markdown_table


@dg.asset(partitions_def=run_batches, deps=["runs", "problems"], group_name="labels", kinds={"parquet", "duckdb"},
          **WAREHOUSE_STEP)
def labels(context: dg.AssetExecutionContext, config: LabelConfig, storage: StorageResource):
    """Correctness of each run's final answer: math-verify, QA exact match / F1, or option letter."""
    root = storage.storage_root()
    references = reference_answers(problem_table(root, ["problem_id", "answer", "answer_type", "choices"]))
    report = label_batch(root, context.partition_key, references, config.to_engine())
    storage.warehouse().refresh_views(("labels",))
    accuracy = report.correct / report.labeled if report.labeled else 0.0
    return dg.MaterializeResult(metadata={
        "dagster/row_count": report.labeled,
        "accuracy": round(accuracy, 4),
        "runs_without_reference": report.without_reference,
        "producer_verdicts": report.producer_verdicts,
        "producer_disagreements": report.disagreements,
        "labels_per_second": round(report.runs / report.seconds, 1) if report.seconds else 0.0,
        "by_labeler": dg.MetadataValue.md(markdown_table(["labeler", "runs"], report.by_labeler.most_common())),
        "incorrect_reasons": dg.MetadataValue.md(
            markdown_table(["reason", "runs"], report.reasons.most_common(15)) if report.reasons else "none"),
    })
