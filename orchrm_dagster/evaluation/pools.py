"""The candidate pools: every executed, labeled run of a (benchmark, policy) on a problem, with what each way of
choosing ranks or votes by."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from orchrm_dagster.contract import DEFAULT_ENVIRONMENT
from orchrm_dagster.evaluation.settings import EvaluationSettings
from orchrm_dagster.rm import benchmark_domains
from orchrm_dagster.storage import StorageRoot, scan_table

GROUP = ("benchmark", "policy", "problem_id")


def candidate_pool(root: StorageRoot, settings: EvaluationSettings, champions: Mapping[str, int],
                   seen_problems: Mapping[str, frozenset[str]], held_out: bool = True) -> pl.DataFrame:
    """One row per labeled run on a problem the champion of its domain never saw (`champions`, `seen_problems`: by
    domain; held_out=False: on a problem it saw instead) (ids and numbers only: the texts stay in Parquet until a verifier or a judge needs them, see
    `run_texts`): its correctness, vote key (the labeler's extracted answer, normalised), the score and tokens of
    its domain's champion (null when that version did not score it), its plan's hash and log-probability and its execution
    tokens. `pkey` numbers the problems of each (benchmark, policy), `idx` a problem's runs in run_id order, `m` is
    the pool size. Tokens are split by stage: `plan_tokens` generated the plan (the orchestrator's prompt and
    completion; every sampled plan pays them, executed or not), `exec_tokens` executed it (the sub-agents)."""
    orchestrator_parts = pl.col("orchestrator_prompt_tokens") + pl.col("orchestrator_completion_tokens")
    runs = scan_table(root, "runs").select(
        "run_id", "benchmark", policy_in_environment(), "policy_name", "problem_id", "plan_hash",
        pl.col("plan_logprob").alias("logprob"),
        pl.coalesce("orchestrator_tokens", orchestrator_parts, pl.lit(0, dtype=pl.Int64)).alias("plan_tokens"),
        pl.col("subagent_tokens").fill_null(0).alias("exec_tokens"))
    # a run that failed for a cause outside its plan (a label without a verdict) stays in its pool, not correct: the
    # method that picks it picked a run that gave no answer
    labels = (scan_table(root, "labels").with_columns(pl.col("is_correct").fill_null(False))
              .group_by("run_id").agg(pl.col("is_correct").first().alias("correct"),
                                      pl.col("extracted_answer").first().alias("extracted")))
    scores = (scan_table(root, "rm_scores").filter(pl.col("rm_version").is_in(sorted(set(champions.values()))))
              .group_by("run_id", "rm_version")
              .agg(pl.col("score").first(), pl.col("tokens").first().alias("rm_tokens")))
    seen = pl.DataFrame([(domain, problem) for domain, problems in seen_problems.items() for problem in problems],
                        schema={"domain": pl.String, "problem_id": pl.String}, orient="row")
    pool = (runs.join(labels, on="run_id").join(_champion_of_benchmark(runs, champions).lazy(), on="benchmark")
            .join(scores, on=["run_id", "rm_version"], how="left")
            .join(seen.lazy(), on=["domain", "problem_id"], how="anti" if held_out else "semi").drop("domain", "rm_version"))
    if settings.benchmarks:
        pool = pool.filter(pl.col("benchmark").is_in(settings.benchmarks))
    if settings.policies:
        pool = pool.filter(pl.col("policy_name").is_in(settings.policies))
    pool = pool.drop("policy_name")
    return index_pool(pool.with_columns(answer=vote_key(pl.col("extracted"))).drop("extracted").collect())


def policy_in_environment() -> pl.Expr:
    """The pool's `policy`: the run's policy name, followed by its environment where that is not real agents, so pools
    never mix environments and every table and plot made from simulated runs says so ("fewshot [simulated
    (SIMULATED)]")."""
    from orchrm_dagster.environments import environment_label, environment_names

    suffixes = {name: f" [{environment_label(name)}]" for name in environment_names()} | {DEFAULT_ENVIRONMENT: ""}
    unknown = pl.lit(" [") + pl.col("environment") + pl.lit("]")
    return (pl.col("policy_name") + pl.col("environment").replace_strict(suffixes, default=unknown,
                                                                         return_dtype=pl.String)).alias("policy")


def _champion_of_benchmark(runs: pl.LazyFrame, champions: Mapping[str, int]) -> pl.DataFrame:
    """Each benchmark of the runs, its domain and the domain's champion (null: none yet)."""
    benchmarks = runs.select("benchmark").unique().collect()["benchmark"]
    domains = benchmark_domains(benchmarks)
    return pl.DataFrame({"benchmark": benchmarks, "domain": domains,
                         "rm_version": pl.Series([champions.get(d) for d in domains], dtype=pl.Int64)})


def index_pool(pool: pl.DataFrame) -> pl.DataFrame:
    """Numbers the problems (`pkey`) and each problem's runs in run_id order (`idx`), and gives each run its pool
    size `m`."""
    return pool.sort([*GROUP, "run_id"]).with_columns(
        pkey=pl.struct(GROUP).rank("dense").cast(pl.Int64) - 1,
        idx=pl.int_range(pl.len()).over(GROUP).cast(pl.Int64),
        m=pl.len().over(GROUP).cast(pl.Int64))


def vote_key(answer: pl.Expr) -> pl.Expr:
    """Answers that differ only in case, spacing, surrounding $ or quotes, or a final period vote together."""
    key = answer.str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars(" $*`\"'.")
    return pl.when(key.str.len_chars() > 0).then(key).otherwise(None)


def vote_key_of(answer: str | None) -> str | None:
    """`vote_key` of one answer: the labeler-independent extraction SCAgent votes with, normalised the same way."""
    if not answer:
        return None
    from orchrm_dagster.mas import extract_answer

    return pl.select(vote_key(pl.lit(extract_answer(answer), dtype=pl.String))).item()


def run_texts(root: StorageRoot, run_ids: list[str]) -> pl.DataFrame:
    """run_id, question, plan and final_answer of the given runs."""
    wanted = pl.DataFrame({"run_id": run_ids}, schema={"run_id": pl.String}).lazy()
    return (scan_table(root, "runs").select("run_id", "question", "plan", "final_answer")
            .join(wanted, on="run_id", how="semi").unique(subset="run_id", keep="first").collect())


def trajectories(root: StorageRoot, run_ids: list[str], final_answers: dict[str, str | None]) -> dict[str, str]:
    """What an executed run did, as a judge or the verifier reads it: the final answer, then each sub-agent's
    output in call order."""
    calls = (scan_table(root, "subagent_calls").filter(pl.col("run_id").is_in(run_ids))
             .sort("run_id", "call_index")
             .group_by("run_id", maintain_order=True)
             .agg(pl.col("output").fill_null("").str.join("\n\n"))
             .collect())
    work = dict(zip(calls["run_id"].to_list(), calls["output"].to_list()))
    return {run_id: f"Final answer: {final_answers.get(run_id) or '(none)'}\n\n{work.get(run_id, '')}".strip()
            for run_id in run_ids}
