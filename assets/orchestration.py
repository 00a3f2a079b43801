import dagster as dg

from assets.deployment import POLICY_STEP
from assets.partitions import orchestration_partitions
from assets.resources import LLMBackendResource, PolicyRegistry, RunDefaultsResource, StorageResource
from assets.run_configs import ExecutionConfig, SamplingConfig, run_settings
from orchrm_dagster.environments import environment_label
from orchrm_dagster.llm import build_backend
from orchrm_dagster.orchestration import Cell, execute_and_land, sample_partition
from orchrm_dagster.reporting import markdown_table


def _cell(context) -> Cell:
    """The engine's (benchmark, policy) of the asset's multi-partition key."""
    keys = context.partition_key.keys_by_dimension
    return Cell(keys["benchmark"], keys["policy"])


@dg.asset(partitions_def=orchestration_partitions, deps=["problems"], group_name="orchestration",
          kinds={"python", "parquet"}, **POLICY_STEP)
def orchestration_samples(context: dg.AssetExecutionContext, config: SamplingConfig, storage: StorageResource,
                          llm: LLMBackendResource, policy_registry: PolicyRegistry,
                          run_defaults: RunDefaultsResource):
    """N orchestration plans per problem from one policy, with each plan's mean token log-probability."""
    cell = _cell(context)
    policy = policy_registry.spec(cell.policy, storage.storage_root())
    backend = build_backend(policy.backend_spec(llm.spec()))
    report = sample_partition(storage.storage_root(), cell.benchmark, policy, backend,
                              run_settings(context, config, run_defaults.to_engine().sampling))
    errors = report.error_counts
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(report.samples),
        "new_samples": report.new_samples,
        "plan_parse_rate": round(report.parse_rate, 4),
        "orchestrator_completion_tokens": sum(s.orchestrator_completion_tokens for s in report.samples),
        "orchestrator_model": backend.model_id,
        "grammar": policy.grammar,
        "plan_errors": dg.MetadataValue.md(markdown_table(["error", "plans"], errors.most_common()) if errors else "none"),
    })


@dg.asset(partitions_def=orchestration_partitions, deps=["orchestration_samples"], group_name="orchestration",
          kinds={"python"}, **POLICY_STEP)
def execution_artifacts(context: dg.AssetExecutionContext, config: ExecutionConfig, storage: StorageResource,
                        llm: LLMBackendResource, run_defaults: RunDefaultsResource):
    """Executes each sampled plan in the configured environment (sub-agents by default, or a simulated truth) and
    lands the runs as a contract batch in the landing zone."""
    settings = run_settings(context, config, run_defaults.to_engine().execution)
    report, landed = execute_and_land(
        storage.storage_root(), _cell(context), llm.build, settings,
        on_run=lambda r: context.log.debug(f"executed {r['run_id']}: {r['error'] or 'ok'}"))
    minutes = report.seconds / 60
    return dg.MaterializeResult(metadata={
        "dagster/row_count": report.executed + report.resumed,
        "landed_batch": landed.batch_id,
        "executed": report.executed,
        "resumed": report.resumed,
        "failed_runs": report.failed,
        "malformed_plans": report.malformed_plans,
        "runs_per_minute": round(report.executed / minutes, 2) if minutes else 0.0,
        "mean_subagent_batch": report.mean_batch_size or 1.0,
        "environment": environment_label(report.environment),
        "subagent_model": report.subagent_model,
        "corpus": settings.corpus or "none",
        "corpus_documents": report.corpus_documents,
        "corpus_rejected_lines": dg.MetadataValue.md("\n".join(f"- {line}" for line in report.corpus_rejected)
                                                     if report.corpus_rejected else "none"),
    })
