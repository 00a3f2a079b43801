import dagster as dg

from assets.deployment import MODEL_STEP
from assets.partitions import orchestration_partitions
from assets.resources import LLMBackendResource, RunDefaultsResource, StorageResource
from assets.run_configs import EvaluationConfig, ScoringConfig, run_settings
from orchrm_dagster.evaluation import AT_N_HEADERS, RATIO_HEADERS, at_largest_n, evaluate, ratio_table_rows
from orchrm_dagster.orchestration import Cell, read_samples, score_samples
from orchrm_dagster.reporting import markdown_image, markdown_table


@dg.asset(partitions_def=orchestration_partitions, deps=["orchestration_samples", "reward_model"],
          group_name="evaluation", kinds={"pytorch", "parquet"}, **MODEL_STEP)
def plan_scores(context: dg.AssetExecutionContext, config: ScoringConfig, storage: StorageResource,
                run_defaults: RunDefaultsResource):
    """The champion's score of every sampled plan, before any sub-agent runs (what Best-of-N chooses by)."""
    root = storage.storage_root()
    keys = context.partition_key.keys_by_dimension
    cell = Cell(keys["benchmark"], keys["policy"])
    samples = read_samples(root, cell)
    scored = score_samples(root, cell, samples, run_settings(context, config, run_defaults.to_engine().scoring))
    storage.warehouse().refresh_views(("plan_scores",))
    tokens = [s.tokens for s in scored.scores.values()]
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(samples),
        "rm_version": scored.rm_version,
        "newly_scored": scored.newly_scored,
        "mean_tokens_per_plan": round(sum(tokens) / len(tokens), 1) if tokens else 0.0,
    })


@dg.asset(deps=["runs", "labels", "reward_model", "rm_scores"], group_name="evaluation",
          kinds={"polars", "parquet", "duckdb"}, **MODEL_STEP)  # judges and off-the-shelf models load here
def evaluation(context: dg.AssetExecutionContext, config: EvaluationConfig, storage: StorageResource,
               llm: LLMBackendResource, run_defaults: RunDefaultsResource):
    """Best-of-N on held-out problems: the accuracy of each way of choosing among N logged runs (the registered
    evaluation methods: the reward model, the baselines, LLM judges, the oracle bound) and its cost in verification
    and execution tokens; appended to the `evaluation` table. An LLM backend is opened only for methods that need
    one."""
    settings = run_settings(context, config, run_defaults.to_engine().evaluation)
    outcome = evaluate(storage.storage_root(), settings, llm.build() if settings.needs_llm_backend else None)
    storage.warehouse().refresh_views(("evaluation", "evaluation_problems", "verifier_scores", "judge_cache",
                                       "offshelf_scores"))
    for note in outcome.notes:
        context.log.warning(note)
    largest, table = at_largest_n(outcome.rows)
    metadata = {
        "evaluation_id": outcome.evaluation_id,
        "rm_version": outcome.rm_version,
        "dagster/row_count": len(outcome.rows),
        "problems": outcome.problems,
        "held_out_problems_excluded": outcome.held_out_excluded,
        "runs_without_rm_score": outcome.runs_without_score,
        "judge_calls": outcome.judge_calls,
        "judge_cached": outcome.judge_cached,
        "judge_unparsed": outcome.judge_unparsed,
        # what was left out and why (a baseline without its model, a benchmark whose domain has no champion)
        "notes": dg.MetadataValue.md("\n".join(f"- {note}" for note in outcome.notes) or "none"),
        "seconds": round(outcome.seconds, 2),
        "seconds_by_method": dg.MetadataValue.json(
            {name: round(seconds, 2) for name, seconds in sorted(outcome.method_seconds.items(),
                                                                 key=lambda item: -item[1])}),
        f"at_n_{largest}": dg.MetadataValue.md(markdown_table(AT_N_HEADERS, table) if table else "no (benchmark, policy) had enough runs per problem"),
    }
    ratios = ratio_table_rows(outcome.verification_ratios)
    if ratios:  # the paper's comparison: trajectory judge vs OrchRM, verification tokens
        metadata["verification_ratio_judge_vs_orchrm"] = dg.MetadataValue.md(
            markdown_table(list(RATIO_HEADERS), ratios))
    for method, report in outcome.method_reports.items():  # e.g. the verifier panel's fitted fusion weights
        metadata[f"{method}_report"] = dg.MetadataValue.json(report)
    for name, png in outcome.plots.items():
        metadata[name] = dg.MetadataValue.md(markdown_image(png, name.replace("_", " ")))
        metadata[f"{name}_file"] = dg.MetadataValue.path(outcome.plot_paths[name])
    for row in (dict(zip(AT_N_HEADERS, r)) for r in table):  # the headline as numbers, charted on the Plots tab
        if row["method"] in ("orchrm_bon", "single"):
            metadata[f"accuracy_at_n_{row['N']}/{row['benchmark']}/{row['policy']}/{row['method']}"] = round(
                float(row["accuracy"]), 4)
    return dg.MaterializeResult(metadata=metadata)
