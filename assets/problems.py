import dagster as dg

from assets.deployment import WAREHOUSE_STEP
from assets.resources import RunDefaultsResource, StorageResource
from assets.run_configs import ProblemsConfig, run_settings
from orchrm_dagster.problems import load_problems, problem_sources
from orchrm_dagster.reporting import markdown_table


@dg.asset(group_name="ingestion", kinds={"parquet", "duckdb"}, **WAREHOUSE_STEP)
def problems(context: dg.AssetExecutionContext, config: ProblemsConfig, storage: StorageResource,
             run_defaults: RunDefaultsResource):
    """Benchmark problems with reference answers: the shipped benchmarks plus `extra_files`."""
    settings = run_settings(context, config, run_defaults.to_engine().problems)
    loaded = load_problems(problem_sources(list(settings.extra_files)))
    root = storage.storage_root()
    root.write_table(loaded.table, root.table_file("problems"))
    storage.warehouse().refresh_views(("problems",))
    for line in loaded.rejected[:20]:
        context.log.warning(f"problem not loaded: {line}")
    counts = loaded.table.group_by(["benchmark", "answer_type"]).aggregate([("problem_id", "count")]).to_pylist()
    return dg.MaterializeResult(metadata={
        "dagster/row_count": loaded.table.num_rows,
        "rejected_lines": len(loaded.rejected),
        "by_benchmark": dg.MetadataValue.md(markdown_table(
            ["benchmark", "answer type", "problems"],
            sorted((c["benchmark"], c["answer_type"], c["problem_id_count"]) for c in counts))),
        "rejected": dg.MetadataValue.md("\n".join(f"- {r}" for r in loaded.rejected[:50]) or "none"),
    })
