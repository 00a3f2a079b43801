"""Does the reward model read the whole plan? Input formats compared on coverage, learning and speed.

    .venv/bin/python bench/rm_whole_plan.py [--samples-root DIR] [--problems 120] [--skip-training]

Formats: `plan_text@256` (the raw question + plan cut at 256 tokens: the format before), `plan_text@512`, and
`graph_first@L` (the parsed plan's agents and edges first, the thinking's middle cut) at the lengths given.

1. Coverage: the share of parsing plans whose every agent and edge lies inside the model's input, on 200 generated
   plans (`generate_runs`), the shipped example batch, real SmolLM2 plans (the `runs` and `orchestration_samples`
   tables of --samples-root, e.g. the storage root of an `orchrm main` run; skipped when absent) and the
   thinking-first adversary (plans opening with 400-600 tokens of thinking).
2. Learning (MiniLM, one epoch, per format): validation accuracy on held-out generated pairs (correct over
   incorrect, plans_decide) and on the adversary's held-out problems, with Best-of-8 vs a single sample there.
3. Scoring speed: plans per second of RewardScorer per format on each corpus, formats interleaved (best of 3).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import orjson  # noqa: E402
import polars as pl  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from orchrm_dagster.plans import Plan, parse_plan  # noqa: E402
from orchrm_dagster.rm import RMTrainConfig, RewardScorer, train_reward_model  # noqa: E402
from orchrm_dagster.rm.config import backbone_path  # noqa: E402
from orchrm_dagster.rm.data import PairTexts  # noqa: E402
from orchrm_dagster.rm.synthetic import best_of_n_accuracy, thinking_first_pairs, thinking_first_problems  # noqa: E402
from orchrm_dagster.rm.template import InputSpec, encode_with_report, format_input  # noqa: E402
from orchrm_dagster.synthetic import EXAMPLE_BATCH, generate_runs  # noqa: E402

FORMATS = (("plan_text", 256), ("plan_text", 512), ("graph_first", 256), ("graph_first", 384), ("graph_first", 512))


def corpora(samples_root: str | None) -> dict[str, tuple[list[str], list[str]]]:
    generated = list(generate_runs(200, seed=3, plans_decide=True))
    example = [r for r in map(_json_or_none, EXAMPLE_BATCH.read_bytes().splitlines())
               if isinstance(r, dict) and isinstance(r.get("plan"), str) and isinstance(r.get("question"), str)]
    adversary = [(p.question, plan) for p in thinking_first_problems(25) for plan in p.plans]
    found = {"generated": ([r["question"] for r in generated], [r["plan"] for r in generated]),
             "example batch": ([r["question"] for r in example], [r["plan"] for r in example]),
             "thinking-first adversary": ([q for q, _ in adversary], [p for _, p in adversary])}
    smollm2 = smollm2_plans(samples_root)
    if smollm2 is not None:
        found["SmolLM2 plans"] = smollm2
    return found


def _json_or_none(line: bytes):
    try:  # the example batch holds lines a producer could get wrong
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def smollm2_plans(samples_root: str | None) -> tuple[list[str], list[str]] | None:
    if not samples_root:
        return None
    frames = []
    for table in ("runs", "orchestration_samples"):
        files = list(Path(samples_root, "tables", table).rglob("*.parquet"))
        if files:
            frame = pl.read_parquet(files, columns=["question", "plan", "policy_name"])
            frames.append(frame.filter(pl.col("policy_name").str.starts_with("smollm2")))
    if not frames:
        return None
    frame = pl.concat(frames).unique(subset=["question", "plan"], maintain_order=True)
    return frame["question"].to_list(), frame["plan"].to_list()


def structure_end(plan: str) -> int:
    """Characters of the plan text up to the end of its last agent block or edge block."""
    return max(plan.rfind("</agent>") + len("</agent>"), plan.rfind("</edge>") + len("</edge>"))


def coverage(tokenizer, questions, plans, input_format: str, max_length: int) -> tuple[float, float, int]:
    """(share of parsing plans whose every agent and edge reaches the model whole, share whose graph does (agent ids,
    types, inputs, edges; descriptions may be cut), number of parsing plans)."""
    keep = [i for i, plan in enumerate(plans) if isinstance(parse_plan(plan), Plan)]
    questions, plans = [questions[i] for i in keep], [plans[i] for i in keep]
    if not plans:
        return float("nan"), float("nan"), 0
    if input_format == "graph_first":
        report = encode_with_report(tokenizer, questions, plans, InputSpec(input_format, max_length))
        return sum(report.structure_whole) / len(plans), sum(report.graph_whole) / len(plans), len(plans)
    else:  # inside iff the input up to the structure's end is not cut
        heads = [plan[:structure_end(plan)] for plan in plans]
        cut = encode_with_report(tokenizer, questions, heads, InputSpec(input_format, max_length)).ids
        full = [len(tokenizer(format_input(q, h))["input_ids"]) for q, h in zip(questions, heads)]
        whole = [len(row) >= n for row, n in zip(cut, full)]
    return sum(whole) / len(whole), sum(whole) / len(whole), len(whole)


def generated_pairs(n_runs: int, seed: int) -> tuple[PairTexts, PairTexts]:
    """Correct-over-incorrect pairs of generated runs (plans decide correctness); the last fifth of the problems
    is the validation split."""
    runs = pl.DataFrame([{k: r[k] for k in ("problem_id", "question", "plan", "is_correct")}
                         for r in generate_runs(n_runs, seed=seed, plans_decide=True)])
    runs = runs.rename({"is_correct": "correct"})
    problems = runs["problem_id"].unique(maintain_order=True).to_list()
    held_out = set(problems[int(len(problems) * 0.8):])
    rows = {"train": [], "validation": []}
    for (problem_id,), group in runs.group_by("problem_id", maintain_order=True):
        good = group.filter(pl.col("correct"))["plan"].to_list()
        bad = group.filter(~pl.col("correct"))["plan"].to_list()
        for k, (chosen, rejected) in enumerate(zip(good, bad)):
            split = "validation" if problem_id in held_out else "train"
            rows[split].append((f"{problem_id}-{k}", group["question"][0], chosen, rejected))
    return tuple(PairTexts(*(list(c) for c in zip(*rows[s])), source=["correct_over_incorrect"] * len(rows[s]))
                 for s in ("train", "validation"))


def plans_per_second(scorer: RewardScorer, questions, plans) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        scorer.score(questions, plans)
        best = min(best, time.perf_counter() - started)
    return len(plans) / best


def scoring_speed(found: dict, formats: list[str], rounds: int = 3) -> None:
    """Plans/s of an untrained MiniLM scorer per format on each corpus; formats interleaved in every round, so a
    busy machine slows them alike. The best round is kept."""
    from orchrm_dagster.rm.template import write_input_spec
    from orchrm_dagster.rm.train import load_backbone

    model, tokenizer = load_backbone(backbone_path(None), seed=0)
    with tempfile.TemporaryDirectory() as folder:
        scorers = {}
        for item in formats:
            input_format, length = item.split("@")
            path = os.path.join(folder, item.replace("@", "-"))
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
            write_input_spec(path, InputSpec(input_format, int(length)))
            scorers[item] = RewardScorer(path, "cpu")
        print(f"{'corpus':<26}" + "".join(f"{item:>18}" for item in formats) + "   (plans/s, mean input tokens)")
        for name, (questions, plans) in found.items():
            best = {item: 0.0 for item in formats}
            for _ in range(rounds):
                for item, scorer in scorers.items():
                    started = time.perf_counter()
                    scorer.score(questions, plans)
                    best[item] = max(best[item], len(plans) / (time.perf_counter() - started))
            tokens = {item: sum(scorer.score_with_lengths(questions, plans)[1]) / len(plans)
                      for item, scorer in scorers.items()}
            print(f"{name:<26}" + "".join(f"{f'{best[i]:.1f} ({tokens[i]:.0f})':>18}" for i in formats), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples-root", default=None, help="Storage root holding SmolLM2 runs/samples")
    parser.add_argument("--problems", type=int, default=120, help="Adversary problems (a fifth held out)")
    parser.add_argument("--runs", type=int, default=1600, help="Generated runs for the generated pairs")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--speed-formats", default="plan_text@256,graph_first@384,graph_first@512",
                        help="Formats whose scoring speed part 3 compares")
    parser.add_argument("--formats", default="plan_text@256,graph_first@256,graph_first@384",
                        help="Formats trained in part 2 (format@length, comma-separated)")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(backbone_path(None))

    print("1. Coverage: share of parsing plans whose every agent and edge is inside the input, whole (graph: ids, "
          "types, inputs, edges; descriptions may be cut)")
    found = corpora(args.samples_root)
    print(f"{'corpus':<26}{'plans':>6}" + "".join(f"{f'{f}@{n}':>17}" for f, n in FORMATS))
    for name, (questions, plans) in found.items():
        cells = [coverage(tokenizer, questions, plans, f, n) for f, n in FORMATS]
        print(f"{name:<26}{cells[0][2]:>6}" + "".join(f"{f'{whole:.3f} ({graph:.3f})':>17}"
                                                     for whole, graph, _ in cells))

    print("\n3. Scoring speed (untrained MiniLM; the weights do not change the speed)")
    scoring_speed(found, args.speed_formats.split(","))
    if args.skip_training:
        return

    print("\n2. Learning (MiniLM, 1 epoch, batch 16, lr 5e-5); plans/s as measured right after training")
    train, validation = generated_pairs(args.runs, seed=11)
    problems = thinking_first_problems(args.problems, seed=5)
    cut = int(len(problems) * 0.8)
    adversary_train, adversary_eval = problems[:cut], problems[cut:]
    adversary_pairs = thinking_first_pairs(adversary_train)
    eval_questions = [p.question for p in adversary_eval for _ in p.plans]
    eval_plans = [plan for p in adversary_eval for plan in p.plans]
    generated_questions, generated_plans = found["generated"]
    print(f"generated pairs: {len(train)} train / {len(validation)} validation; adversary: {len(adversary_pairs)} "
          f"train pairs, {len(adversary_eval)} held-out problems x 8 plans")
    print(f"{'format':<18}{'gen val acc':>12}{'adv BoN-8':>11}{'adv single':>11}{'gen plans/s':>13}"
          f"{'adv plans/s':>13}{'train s':>9}")
    for item in args.formats.split(","):
        input_format, length = item.split("@")
        config = RMTrainConfig(max_length=int(length), input_format=input_format, epochs=1.0, batch_size=16)
        both = PairTexts(*(a + b for a, b in zip(
            (train.pair_id, train.question, train.chosen_plan, train.rejected_plan, train.source),
            (adversary_pairs.pair_id, adversary_pairs.question, adversary_pairs.chosen_plan,
             adversary_pairs.rejected_plan, adversary_pairs.source))))
        with tempfile.TemporaryDirectory() as out:
            started = time.perf_counter()
            result = train_reward_model(both, validation, config, out, resume=False)
            seconds = time.perf_counter() - started
            scorer = RewardScorer(result.model_dir, "cpu")
            scores = scorer.score(eval_questions, eval_plans)
            rows = [scores[k * 8:(k + 1) * 8] for k in range(len(adversary_eval))]
            best, single = best_of_n_accuracy(adversary_eval, rows)
            print(f"{item:<18}{result.validation_metrics['val_accuracy']:>12.3f}{best:>11.3f}{single:>11.3f}"
                  f"{plans_per_second(scorer, generated_questions, generated_plans):>13.1f}"
                  f"{plans_per_second(scorer, eval_questions, eval_plans):>13.1f}{seconds:>9.0f}", flush=True)


if __name__ == "__main__":
    main()
