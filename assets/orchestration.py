from collections import Counter

import dagster as dg

from assets.configs import ExecutionConfig, SamplingConfig
from assets.partitions import orchestration_partitions
from orchrm_dagster.llm.factory import build_backend
from orchrm_dagster.mas.agents import AgentSettings
from orchrm_dagster.orchestration import ExecutionSettings, execute_samples, sample_plans
from orchrm_dagster.orchestration.store import partition_folder, read_samples, select_problems, write_samples
from orchrm_dagster.reporting import markdown_table
from orchrm_dagster.resources import LLMBackendResource, PolicyRegistry, StorageResource
from orchrm_dagster.storage.root import local_work_dir


def _dimensions(context) -> tuple[str, str]:
    keys = context.partition_key.keys_by_dimension
    return keys["benchmark"], keys["policy"]


@dg.asset(partitions_def=orchestration_partitions, deps=["problems"], group_name="orchestration",
          kinds={"python", "parquet"})
def orchestration_samples(context: dg.AssetExecutionContext, config: SamplingConfig, storage: StorageResource,
                          llm: LLMBackendResource, policy_registry: PolicyRegistry):
    """N orchestration plans per problem from one policy, with each plan's mean token log-probability."""
    benchmark, policy_name = _dimensions(context)
    root = storage.storage_root()
    policy = policy_registry.spec(policy_name, llm)
    problems = select_problems(root, benchmark, config.problem_limit, config.problem_ids)
    kept = read_samples(root, context.partition_key)
    wanted = {(p.problem_id, i) for p in problems for i in range(config.n_samples)}
    kept = [s for s in kept if (s.problem_id, s.sample_index) in wanted and s.seed is not None]
    backend = build_backend(policy.resolved_backend())
    fresh = sample_plans(policy, backend, problems, config.n_samples, config.seed,
                         skip_run_ids=frozenset(s.run_id for s in kept))
    samples = kept + fresh
    write_samples(root, context.partition_key, samples)
    parsed = sum(s.plan_parses for s in samples)
    errors = Counter(s.plan_error.split(":", 1)[0] for s in samples if s.plan_error)
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(samples),
        "new_samples": len(fresh),
        "plan_parse_rate": round(parsed / len(samples), 4) if samples else 0.0,
        "orchestrator_completion_tokens": sum(s.orchestrator_completion_tokens for s in samples),
        "orchestrator_model": backend.model_id,
        "grammar": policy.grammar,
        "plan_errors": dg.MetadataValue.md(markdown_table(["error", "plans"], errors.most_common()) if errors else "none"),
    })


@dg.asset(partitions_def=orchestration_partitions, deps=["orchestration_samples"], group_name="orchestration",
          kinds={"python"})
def execution_artifacts(context: dg.AssetExecutionContext, config: ExecutionConfig, storage: StorageResource,
                        llm: LLMBackendResource):
    """Executes each sampled plan with sub-agents and lands the runs as a contract batch in the landing zone."""
    root = storage.storage_root()
    samples = read_samples(root, context.partition_key)
    batch_name = f"mas-{partition_folder(context.partition_key)}.jsonl"
    partial = local_work_dir(root) / "execution" / f"{batch_name}.partial"
    _seed_partial_from_landed(root, batch_name, partial)
    settings = ExecutionSettings(
        subagent_temperature=config.subagent_temperature, subagent_max_new_tokens=config.subagent_max_new_tokens,
        plan_timeout_s=config.plan_timeout_s, concurrent_plans=config.concurrent_plans,
        agents=AgentSettings(sc_samples=config.sc_samples, debate_rounds=config.debate_rounds,
                             reflexion_rounds=config.reflexion_rounds))
    backend = llm.backend()
    report = execute_samples(samples, backend, partial, settings,
                             on_run=lambda r: context.log.debug(f"executed {r['run_id']}: {r['error'] or 'ok'}"))
    landed = root.land(partial, name=batch_name)
    partial.unlink()
    minutes = report.seconds / 60
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(samples),
        "landed_batch": landed.batch_id,
        "executed": report.executed,
        "resumed": report.resumed,
        "failed_runs": report.failed,
        "malformed_plans": report.malformed_plans,
        "runs_per_minute": round(report.executed / minutes, 2) if minutes else 0.0,
        "mean_subagent_batch": report.mean_batch_size or 1.0,
        "subagent_model": backend.model_id,
    })


def _seed_partial_from_landed(root, batch_name: str, partial) -> None:
    """Runs already landed for this partition count as finished, so re-materializing redoes nothing."""
    landed = root.landing_path(batch_name)
    if not partial.exists() and root.exists(landed):
        partial.parent.mkdir(parents=True, exist_ok=True)
        root.fs.get_file(landed, str(partial))
