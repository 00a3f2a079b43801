"""Reward-model scoring throughput: RewardScorer vs one plan at a time vs the forward-pass ceiling, one run.

    .venv/bin/python bench/rm_score.py [--plans 128] [--max-length 256] [--batch-size 32] [--rounds 3] [--model-dir DIR]
        [--backbone minilm|smollm2|DIR] [--device cpu|cuda|auto] [--dtype auto|fp32|bf16|fp16]
    .venv/bin/python bench/rm_score.py --mixed [--plans 512] [--shortest 20] [--longest 500] [--rounds 1] ...
    .venv/bin/python bench/rm_score.py --where [--plans 256] [--backbone DIR] ...

--where prints only the share of RewardScorer.score's time spent outside the model's forward passes (encoding,
padding, batching, reading scores back), on one torch thread on the CPU. A tiny backbone (tests/tiny_models.py,
whose forward pass is cheap, as a small model's is on a GPU) shows what the forward passes would leave exposed;
on cuda each forward pass is waited for, so the share there is an upper bound.

Plans are a realistic length mix: a third low-degree plans (thinking + direct answer), the rest random_plan_text with 1-3
agents, so inputs range from ~60 tokens to the 256-token cap. Without --model-dir the --backbone (default: the packaged
all-MiniLM-L6-v2; smollm2: the embedded SmolLM2-135M de-quantized, a Llama-type model; or a sequence-classification
model folder) with an untrained head is scored (throughput does not depend on the weights), reading plans as
plan_text; a --model-dir written by train_reward_model (bench/rm_train.py --output-dir DIR: DIR/a/model) is read in
the format it was trained with, at --max-length.
  scorer:     RewardScorer.score(all plans): tokenize, sort by length, batch (at most --batch-size inputs and, on
              CPU, 2048 tokens), restore order.
  one by one: RewardScorer.score([plan]) per plan.
  ceiling:    the model's forward pass alone on the scorer's batches, each made one length (its mean), pre-built
              tensors: the same tokens with no padding, no tokenization and no bookkeeping.
--mixed instead measures what length bucketing buys: plans whose token counts are spread evenly over --shortest to
--longest (max length 512), scored by the same model in three batchings (the model's time only, no tokenizing):
  input order: --batch-size plans at a time as they come, each batch padded to its longest (the batching before
               length buckets);
  sorted:      length-sorted batches of --batch-size, no token budget;
  scorer:      the scorer's own batches (sorted, at most --batch-size inputs and, on CPU, 2048 padded tokens).
It prints plans/s (wall clock and CPU time) and the padded tokens each batching computes (the pad share of all).
Each of --rounds rounds runs every method once; each method's fastest run is kept. Rates are given by wall clock and by this
process's CPU time: on a shared CPU the wall clock also counts time spent descheduled (CPU time, in turn, counts
OpenMP spin-waits with 2+ threads).
Run with torch's default threads, then with 1 (on cuda: once, with the default threads; the timed runs wait for the GPU,
and a last line gives the peak GPU memory torch allocated). On a GPU machine without the venv:

    PYTHONPATH=/tmp/site:/tmp/pkgs:. HF_HUB_OFFLINE=1 python3 bench/rm_score.py --device cuda --backbone smollm2 \
        --plans 1024 --max-length 1024 --batch-size 64 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from orchrm_dagster.problems import load_shipped  # noqa: E402
from orchrm_dagster.rm import RewardScorer  # noqa: E402
from orchrm_dagster.rm.config import backbone_path  # noqa: E402
from orchrm_dagster.rm.template import InputSpec, encode, write_input_spec  # noqa: E402
from orchrm_dagster.rm.train import load_backbone  # noqa: E402
from orchrm_dagster.synthetic import random_plan_text  # noqa: E402


def scoring_inputs(n: int) -> tuple[list[str], list[str]]:
    questions = [problem["question"] for problem in load_shipped("gsm8k_test")]
    plans = []
    for i in range(n):
        rng = random.Random(i)
        if i % 3 == 0:
            thinking = random_plan_text(rng, 1).split("</thinking>")[0]
            plans.append(f"{thinking}</thinking>\n<answer>{rng.randint(1, 999)}</answer>")
        else:
            plans.append(random_plan_text(rng, rng.randint(1, 3)))
    return [questions[i % len(questions)] for i in range(n)], plans


def untrained_model_dir(folder: str, backbone: str | None = None, max_length: int = 256) -> str:
    from rm_train import backbone_folder  # bench/ is the script's folder, first on sys.path

    model, tokenizer = load_backbone(backbone_path(backbone_folder(backbone, folder)), seed=0)
    target = os.path.join(folder, "untrained")
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    write_input_spec(target, InputSpec("plan_text", max_length, None))
    return target


def mixed_inputs(tokenizer, n: int, shortest: int, longest: int) -> tuple[list[str], list[str]]:
    """n (question, plan) pairs whose plan_text encodings run from about `shortest` to `longest` tokens, evenly
    spread, in random order: a plan is random_plan_text cut at a drawn number of tokens."""
    rng = random.Random(0)
    questions, plans = [], []
    for i in range(n):
        question = f"What is {rng.randint(2, 99)} times {rng.randint(2, 99)}?"
        overhead = len(tokenizer(f"Question:\n{question}\n\nPlan:\n")["input_ids"])
        text = " ".join(random_plan_text(random.Random(i * 10 + k), 3) for k in range(3))
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        plans.append(tokenizer.decode(ids[:max(1, rng.randint(shortest, longest) - overhead)]))
        questions.append(question)
    return questions, plans


def padded_tokens(batches: list[list[int]], lengths: list[int]) -> int:
    return sum(len(batch) * max(lengths[i] for i in batch) - sum(lengths[i] for i in batch) for batch in batches)


def measure_mixed(scorer: RewardScorer, questions, plans, rounds: int) -> None:
    from orchrm_dagster.rm.score import length_sorted_batches

    ids = encode(scorer.tokenizer, questions, plans, scorer.spec)
    lengths = [len(row) for row in ids]
    size = scorer.batch_size
    batchings = {"input order": [list(range(i, min(i + size, len(ids)))) for i in range(0, len(ids), size)],
                 "sorted": length_sorted_batches(lengths, size, None),
                 "scorer": scorer.batches(lengths)}

    def run(batches):
        for batch in batches:
            scorer.forward([ids[i] for i in batch])

    scorer.forward(ids[:size])  # warm-up
    times = {name: [] for name in batchings}
    for _ in range(rounds):
        for name, batches in batchings.items():
            times[name].append(timed(lambda: run(batches), scorer.device))
    real = sum(lengths)
    for name, batches in batchings.items():
        wall, cpu = (min(t[which] for t in times[name]) for which in (0, 1))
        pads = padded_tokens(batches, lengths)
        print(f"{name:11s}: {len(plans) / wall:6.1f} plans/s wall, {len(plans) / cpu:6.1f} by CPU time | "
              f"{len(batches):3d} batches, {pads:7,d} padded tokens ({pads / (real + pads):5.1%} of "
              f"{real + pads:,} computed)", flush=True)


def ceiling_batches(scorer: RewardScorer, questions, plans) -> list[torch.Tensor]:
    ids = encode(scorer.tokenizer, questions, plans, scorer.spec)
    batches = []
    for batch in scorer.batches([len(row) for row in ids]):
        width = round(statistics.mean(len(ids[i]) for i in batch))
        batches.append(torch.tensor([ids[batch[-1]][:width]] * len(batch), device=scorer.device))
    return batches


def timed(run, device: str = "cpu") -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one run (on cuda, until the GPU has finished it)."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(scorer: RewardScorer, questions, plans, rounds: int) -> dict[str, tuple[float, float]]:
    """plans/s by wall clock and by CPU time, per method: the best of `rounds` rounds, each round running every
    method once, so that a change in the machine's load hits all methods alike."""
    batches = ceiling_batches(scorer, questions, plans)

    def ceiling():
        with torch.inference_mode():
            for batch in batches:
                scorer.model(input_ids=batch, attention_mask=torch.ones_like(batch))

    runs = {"scorer": lambda: scorer.score(questions, plans),
            "one by one": lambda: [scorer.score([q], [p]) for q, p in zip(questions, plans)],
            "ceiling": ceiling}
    scorer.score(questions[:scorer.batch_size], plans[:scorer.batch_size])  # warm-up
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(timed(run, scorer.device))
    return {name: (len(plans) / min(wall for wall, _ in t), len(plans) / min(cpu for _, cpu in t))
            for name, t in times.items()}


def where_the_time_goes(scorer: RewardScorer, questions, plans, rounds: int) -> None:
    """The share of RewardScorer.score's time spent outside the model's forward passes (building and tokenizing the
    inputs, padding, batching, reading the scores back): the outermost module calls timed inside score() (each waited
    for on cuda), by wall clock and by this process's CPU time, on one torch thread on the CPU (a shared CPU's wall
    clock counts time descheduled; CPU time then measures the work). Best of `rounds`."""
    if scorer.device == "cpu":
        torch.set_num_threads(1)
    inside, depth = [0.0, 0.0], [0]
    original = torch.nn.Module.__call__

    def timed_call(self, *args, **kwargs):  # a decoder's body, then its score head
        if depth[0]:
            return original(self, *args, **kwargs)
        depth[0] += 1
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            out = original(self, *args, **kwargs)
            if scorer.device == "cuda":
                torch.cuda.synchronize()
        finally:
            depth[0] -= 1
            inside[0] += time.perf_counter() - wall
            inside[1] += time.process_time() - cpu
        return out

    scorer.score(questions[:8], plans[:8])  # warm-up
    best = None
    for _ in range(rounds):
        inside[:] = [0.0, 0.0]
        torch.nn.Module.__call__ = timed_call
        try:
            total = timed(lambda: scorer.score(questions, plans), scorer.device)
        finally:
            torch.nn.Module.__call__ = original
        if best is None or total[1] < best[0][1]:
            best = (total, tuple(inside))
    for clock, which in (("wall", 0), ("CPU", 1)):
        total, forward = best[0][which], best[1][which]
        print(f"where scoring's time goes ({clock}): {total:.2f} s for {len(plans)} plans, forward passes "
              f"{forward:.2f} s, outside them {total - forward:.2f} s ({(total - forward) / total:.1%})", flush=True)


def report(threads: int, rates: dict[str, tuple[float, float]]) -> None:
    for clock, which in (("wall", 0), ("CPU-time", 1)):
        scorer, one, ceiling = (rates[name][which] for name in ("scorer", "one by one", "ceiling"))
        print(f"{threads} thread(s), {clock:8s}: scorer {scorer:6.1f} plans/s | one by one {one:6.1f} | "
              f"ceiling {ceiling:6.1f} | scorer/one-by-one {scorer / one:.2f}x | ceiling/scorer {ceiling / scorer:.2f}x",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model-dir")
    parser.add_argument("--backbone", help="without --model-dir: minilm (default), smollm2 or a model folder")
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    parser.add_argument("--dtype", choices=["auto", "fp32", "bf16", "fp16"], default="auto")
    parser.add_argument("--mixed", action="store_true", help="input-order vs length-sorted batches on mixed lengths")
    parser.add_argument("--where", action="store_true", help="only the share of scoring time outside the forward pass")
    parser.add_argument("--shortest", type=int, default=20)
    parser.add_argument("--longest", type=int, default=500)
    args = parser.parse_args()
    if args.mixed:
        return main_mixed(args)
    questions, plans = scoring_inputs(args.plans)
    with tempfile.TemporaryDirectory() as folder:
        model_dir = args.model_dir or untrained_model_dir(folder, args.backbone, args.max_length)
        scorer = RewardScorer(model_dir, device=args.device, max_length=args.max_length, batch_size=args.batch_size,
                              dtype=args.dtype)
        lengths = [len(row) for row in encode(scorer.tokenizer, questions, plans, scorer.spec)]
        on = f"{scorer.device} ({torch.cuda.get_device_name()})" if scorer.device == "cuda" else scorer.device
        print(f"{type(scorer.model).__name__} on {on}, {scorer.spec.input_format}: {len(plans)} plans, tokens min "
              f"{min(lengths)} median {statistics.median(lengths):.0f} max {max(lengths)} "
              f"({sum(n == args.max_length for n in lengths)} at the cap), batch {args.batch_size}, "
              f"{len(scorer.batches(lengths))} batches, {scorer.dtype}, load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs", flush=True)
        if args.where:
            return where_the_time_goes(scorer, questions, plans, args.rounds)
        for threads in ((torch.get_num_threads(),) if scorer.device == "cuda" else (torch.get_num_threads(), 1)):
            torch.set_num_threads(threads)
            report(threads, measure(scorer, questions, plans, args.rounds))
        if scorer.device == "cuda":
            print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


def main_mixed(args) -> None:
    with tempfile.TemporaryDirectory() as folder:
        model_dir = args.model_dir or untrained_model_dir(folder, args.backbone, 512)
        scorer = RewardScorer(model_dir, device=args.device, max_length=512, batch_size=args.batch_size,
                              dtype=args.dtype)
        questions, plans = mixed_inputs(scorer.tokenizer, args.plans, args.shortest, args.longest)
        lengths = [len(row) for row in encode(scorer.tokenizer, questions, plans, scorer.spec)]
        print(f"{type(scorer.model).__name__} on {scorer.device}, {scorer.dtype}, {torch.get_num_threads()} "
              f"thread(s): {len(plans)} plans, tokens min {min(lengths)} median {statistics.median(lengths):.0f} "
              f"max {max(lengths)}, batch {args.batch_size}, load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs", flush=True)
        measure_mixed(scorer, questions, plans, args.rounds)


if __name__ == "__main__":
    main()
