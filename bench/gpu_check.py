"""A prepared GPU check (issues 32, 39): one short run on one device that measures what the CPU machine cannot, the
plain torch loops and orchrm's own paths side by side, each figure printed beside its ceiling from the card's datasheet.

    bash bench/gpu_check.sh [--device cuda|cpu] [--tiny] [--peak-tflops 989] [--peak-tflops-fp32 67] [--hbm-tbps 3.35]
        [--shape 135m|1b] [--train-shapes 135m 1b] [--steps 5] [--pairs-per-step 8] [--seq-len 1024] [--plans 512]
        [--max-new-tokens 256] [--gen-batches 8 32] [--rm-pairs 1024] [--group-size 16] [--plan-tokens 384]
        [--max-agents 2]
    H200: bash bench/gpu_check.sh --peak-tflops 989 --hbm-tbps 4.8 --card H200   (sized to end within 5 minutes)

Sections, run in --sections' order (orchrm's paths first), each started only within --budget-s (random weights:
throughput does not depend on them; nothing is downloaded; the tokenizer is SmolLM2's, saved in bench/tokenizer/,
3.4 MB, so that it travels to a GPU machine; the 94 MB GGUF it came from is read only without it):
  1. reward-model training: SmolLM2-135M's architecture (LlamaConfig: hidden 576, 30 layers, 9 heads, 3 kv heads,
     intermediate 1536, vocab 49152; --shape 1b: Llama-3.2-1B's, hidden 2048, 16 layers, 32 heads, 8 kv heads,
     intermediate 8192, with the tokenizer's vocabulary, not its 128,256: an embedding is a lookup, not a matmul) as a
     LlamaForSequenceClassification, bf16 weights, pairs of two --seq-len token sequences, AdamW in a plain torch loop
     on the Bradley-Terry loss -logsigmoid(r_chosen - r_rejected); full fine-tuning, then LoRA
     (orchrm_dagster.lora.lora_config, rank 16, peft's Llama default q_proj/v_proj, SEQ_CLS). One warm-up step, then
     --steps timed steps. Peak memory: torch.cuda.max_memory_allocated (cuda) or the
     process's ru_maxrss (cpu: a high-water mark of the whole process, never reset).
  2. scoring: RewardScorer as orchrm builds it (`scorer_for`, ScoringSettings' defaults: batches cut by tokens), fp32
     then bf16, on a saved sequence-classification checkpoint of that model, --plans plans of generated plan text read
     at --seq-len tokens; orchrm.score is the dtype ScoringSettings' auto picks on the device (bf16 on a GPU).
  3. a GRPO step's generation: the causal LM (bf16) with model.generate, sampling, --max-new-tokens forced (random
     weights would stop at an EOS at random), batches of --gen-batches prompts.
  4. orchrm's reward-model training: `train_reward_model` (TRL's RewardTrainer as orchrm drives it) with orchrm's
     default RMTrainConfig (graph_first inputs of at most 512 tokens, batch 16, fp32 weights, bf16 autocast on a GPU)
     on a random backbone of each --train-shapes, --rm-pairs pairs of generated plans; its own pairs/s (the whole
     training call: the first step's warm-up included).
  5. the round's own generation: `sample_rows`, the batched decoding GRPO's PlanSampler calls, on the round's prompt
     (the few-shot orchestrator's) for a group of --group-size plans of at most --plan-tokens tokens and --max-agents
     agents (GRPOSettings' defaults: 384, 2), plan grammar on, temperature 1, seeded rows; with the decoding cache
     auto resolves to (growing, on every device) and with the static one (compiled, CUDA graphs on CUDA). Tokens
     are the plans' own (rows end where the grammar lets the random model stop); the first call (compilation) is
     reported apart.
Ceilings: training 6 x params x tokens (LoRA: 4 x, no weight gradients) plus attention's 12 x layers x hidden x
seq-len per token, scoring 2 x params + 4 x layers x hidden x seq-len per token read, at --peak-tflops (default 989:
H100 SXM dense bf16; the fp32 scorer also against --peak-tflops-fp32, default 67: H100 SXM fp32 without tensor cores);
"params" are the non-embedding parameters (an embedding is a lookup, not a matmul). Decode is bound by memory
bandwidth, not FLOPs: a step reads every weight once (the tied LM head included) and the KV cache so far, so its
ceiling is batch x --hbm-tbps / bytes read per step (default 3.35 TB/s: H100 SXM HBM3).
--tiny: hidden 64, 2 layers, 128-token pairs, 2 steps, 16 plans, 16 new tokens, 32 reward-model pairs, one-agent plans
of at most 200 tokens (the least the grammar fits is 324 for two agents): the same code in about a minute on a CPU.
Each figure is also printed as a line `figure: <section>.<name> = <value> <unit>` (the slow test reads these).

On a GPU machine without this project's environment (the device image: Python 3.12, torch 2.11, transformers 5.17,
peft, accelerate, pandas, pyarrow, but no trl, datasets or pydantic): `bash bench/gpu_wheels.sh` here downloads the
wheels the check needs (trl, datasets, dill, multiprocess, xgrammar, apache-tvm-ffi, pydantic, pydantic-core,
annotated-types, typing-inspection, typing-extensions, orjson; about 9 MB) into .whl/, which travels as a carried path;
gpu_check.sh installs them (to /tmp/gpu_check_site) when it finds them. The sections import no duckdb, polars or
dagster (orchrm's modules they use import those lazily or not at all), whose wheels (78 MB) could not travel.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

H100_NOTE = "H100 SXM"
ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_DIR = ROOT / "bench" / "tokenizer"  # SmolLM2's tokenizer, saved from the embedded GGUF
SHAPES = {  # LlamaConfig sizes
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3),  # SmolLM2-135M
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, rope_theta=500000.0),  # Llama-3.2-1B
}
SPEED_QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips to her "
                  "friends in May. How many clips did Natalia sell altogether in April and May?")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a tiny config (hidden 64, 2 layers, 128-token pairs)")
    parser.add_argument("--shape", choices=["135m", "1b"], default="135m",
                        help="the model of every section but orchrm's training (default 135m: SmolLM2-135M's)")
    parser.add_argument("--train-shapes", nargs="+", choices=["135m", "1b"], default=["135m", "1b"],
                        help="the backbones orchrm's reward-model training runs on (section 4)")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="the card's dense bf16 TFLOP/s (default 989: H100 SXM)")
    parser.add_argument("--peak-tflops-fp32", type=float, default=67.0,
                        help="the card's fp32 TFLOP/s without tensor cores (default 67: H100 SXM)")
    parser.add_argument("--hbm-tbps", type=float, default=3.35, help="memory bandwidth in TB/s (default 3.35: H100 SXM)")
    parser.add_argument("--card", default=None, help="the card the peak figures are for (default: H100 SXM when the "
                                                     "defaults are kept, else 'as given')")
    parser.add_argument("--steps", type=int, default=None, help="timed training steps (default 5; tiny 2)")
    parser.add_argument("--pairs-per-step", type=int, default=None, help="pairs a step (default 8; tiny 2)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens a side of a pair (default 1024; tiny 128)")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--plans", type=int, default=None, help="plans scored (default 512; tiny 16)")
    parser.add_argument("--score-batch-size", type=int, default=None,
                        help="plans a scoring batch at most (default: orchrm's, none; batches are cut by tokens)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default 256; tiny 16")
    parser.add_argument("--gen-batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--rm-pairs", type=int, default=None, help="orchrm's training pairs (default 1024; tiny 32)")
    parser.add_argument("--group-size", type=int, default=16, help="plans of the round's group (default 16)")
    parser.add_argument("--plan-tokens", type=int, default=None,
                        help="a plan's token budget (default 384, GRPOSettings'; tiny 200)")
    parser.add_argument("--max-agents", type=int, default=None,
                        help="most agents a plan may use (default 2, GRPOSettings'; tiny 1: shorter plans fit)")
    parser.add_argument("--sections", default="orchrm_train,score,orchrm_generate,train,generate",
                        help="the sections, in the order they run (default: orchrm's paths first: the targets)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="a section that would start later than this many seconds into the check is skipped "
                             "(default 270: the check ends within 5 minutes; tiny: none)")
    args = parser.parse_args(argv)
    defaults = dict(steps=(2, 5), pairs_per_step=(2, 8), seq_len=(128, 1024), plans=(16, 512), max_new_tokens=(16, 256),
                    rm_pairs=(32, 1024), plan_tokens=(200, 384), max_agents=(1, 2), budget_s=(float("inf"), 270.0))
    for name, (tiny, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else full)
    if args.card is None:
        kept = (args.peak_tflops, args.peak_tflops_fp32, args.hbm_tbps) == (989.0, 67.0, 3.35)
        args.card = H100_NOTE if kept else "as given"
    return args


def model_config(tokenizer, shape: str):
    from transformers import LlamaConfig

    size = {"rope_theta": 100000.0, **SHAPES[shape]}
    return LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, tie_word_embeddings=True,
                       rms_norm_eps=1e-5, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, num_labels=1, **size)


def shape_of(args) -> str:
    return "tiny" if args.tiny else args.shape


def load_tokenizer():
    """SmolLM2's tokenizer from bench/tokenizer/ (from the embedded GGUF where that folder is missing)."""
    from transformers import AutoTokenizer

    if (TOKENIZER_DIR / "tokenizer.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    else:
        from orchrm_dagster.llm import EMBEDDED_GGUF, embedded_model_dir

        tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir()), gguf_file=EMBEDDED_GGUF)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def non_embedding_params(model) -> int:
    """Parameters a token multiplies by: all but the input embeddings (the tied LM head is counted by the caller)."""
    embedding = model.get_input_embeddings().weight
    return sum(p.numel() for p in model.parameters() if p is not embedding)


def sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str):
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gib(device: str) -> tuple[float, str]:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30, "torch.cuda.max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "ru_maxrss (whole process, high-water mark)"


class Report:
    def __init__(self):
        self.rows: list[tuple[str, str, float, str, float | None]] = []

    def figure(self, key: str, value: float, unit: str, ceiling: float | None = None, what: str = ""):
        print(f"figure: {key} = {value:.4g} {unit}")
        if ceiling:
            print(f"  vs ceiling {ceiling:.4g} {unit}: {100 * value / ceiling:.3g}% of it")
        self.rows.append((key, unit, value, what, ceiling))

    def table(self):
        print("\n== summary ==")
        print(f"{'figure':<44} {'measured':>12} {'ceiling':>12} {'of ceiling':>10}  unit")
        for key, unit, value, _, ceiling in self.rows:
            share = f"{100 * value / ceiling:.3g}%" if ceiling else "-"
            limit = f"{ceiling:.4g}" if ceiling else "-"
            print(f"{key:<44} {value:>12.4g} {limit:>12} {share:>10}  {unit}")


def flops_per_token(params: int, layers: int, hidden: int, seq_len: int, weight_factor: int, attn_factor: int) -> float:
    return weight_factor * params + attn_factor * layers * hidden * seq_len


# --- 1. reward-model training -----------------------------------------------------------------------------------------

def train_section(args, tokenizer, report: Report):
    from transformers import LlamaForSequenceClassification, set_seed

    print(f"\n== 1. reward-model training: {args.pairs_per_step} pairs x 2 x {args.seq_len} tokens a step, bf16 "
          f"weights, AdamW, Bradley-Terry loss; 1 warm-up step, {args.steps} timed ==")
    config = model_config(tokenizer, shape_of(args))
    pad = tokenizer.pad_token_id
    generator = torch.Generator().manual_seed(0)
    for mode in ("full", "lora"):
        set_seed(0)
        reset_peak(args.device)
        model = LlamaForSequenceClassification(config).to(dtype=torch.bfloat16)
        params = non_embedding_params(model)
        if mode == "lora":
            from peft import get_peft_model

            from orchrm_dagster.lora import lora_config

            model = get_peft_model(model, lora_config(args.lora_rank, task_type="SEQ_CLS", model_type="llama"))
        model.to(args.device).train()
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-5)

        def batch():
            ids = torch.randint(0, config.vocab_size, (2 * args.pairs_per_step, args.seq_len), generator=generator)
            ids[ids == pad] = pad + 1  # no pad token inside: the classifier reads each row's last token
            return ids.to(args.device)

        def step(ids):
            rewards = model(input_ids=ids).logits.squeeze(-1).float()
            chosen, rejected = rewards[:args.pairs_per_step], rewards[args.pairs_per_step:]
            loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        step(batch())  # warm-up: kernels, allocator, optimizer state
        batches = [batch() for _ in range(args.steps)]
        sync(args.device)
        start = time.perf_counter()
        for ids in batches:
            loss = step(ids)
        sync(args.device)
        seconds = time.perf_counter() - start
        pairs_per_s = args.steps * args.pairs_per_step / seconds
        memory, memory_source = peak_memory_gib(args.device)
        n_trainable = sum(p.numel() for p in trainable)
        weight_factor = 6 if mode == "full" else 4
        per_token = flops_per_token(params, config.num_hidden_layers, config.hidden_size, args.seq_len,
                                    weight_factor, 12)
        per_pair = per_token * 2 * args.seq_len
        ceiling = args.peak_tflops * 1e12 / per_pair
        print(f"-- {mode}: {params / 1e6:.2f}M non-embedding params, {n_trainable / 1e6:.3f}M trainable; "
              f"{args.steps} steps in {seconds:.3f} s, last loss {loss.item():.4f}")
        print(f"  ceiling: ({weight_factor} x {params / 1e6:.2f}M params + 12 x {config.num_hidden_layers} layers x "
              f"{config.hidden_size} hidden x {args.seq_len} seq attention, causal half counted too) = {per_token / 1e9:.4g} GFLOP/token"
              f"{' (LoRA: 4 x, frozen weights get no weight gradients)' if mode == 'lora' else ''}"
              f" x 2 x {args.seq_len} tokens per pair = {per_pair / 1e12:.4g} TFLOP/pair, at {args.peak_tflops:g} "
              f"TFLOP/s dense bf16 ({args.card}) -> {ceiling:.4g} pairs/s")
        report.figure(f"train.{mode}.pairs_per_s", pairs_per_s, "pairs/s", ceiling)
        report.figure(f"train.{mode}.peak_memory", memory, "GiB", what=memory_source)
        print(f"  peak memory from {memory_source}")
        del model, optimizer, trainable
        if args.device == "cuda":
            torch.cuda.empty_cache()


# --- 2. scoring -------------------------------------------------------------------------------------------------------

def plan_texts(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    from orchrm_dagster.synthetic import random_plan_text

    rng = random.Random(seed)
    plans = [" ".join(random_plan_text(rng, rng.randint(1, 3)) for _ in range(2)) for _ in range(n)]
    questions = [f"Question {i}: what is {rng.randint(2, 999)} times {rng.randint(2, 999)}?" for i in range(n)]
    return questions, plans


def score_section(args, tokenizer, report: Report):
    from transformers import LlamaForSequenceClassification, set_seed

    from orchrm_dagster.rm.config import ScoringSettings
    from orchrm_dagster.rm.score import resolve_dtype, scorer_for
    from orchrm_dagster.rm.template import InputSpec, write_input_spec

    print(f"\n== 2. scoring: RewardScorer as orchrm builds it (scorer_for, ScoringSettings' defaults: batches cut by "
          f"tokens, batch size {args.score_batch_size or 'uncapped'}) on {args.plans} plans read at up to "
          f"{args.seq_len} tokens; fp32 vs bf16 ==")
    config = model_config(tokenizer, shape_of(args))
    questions, plans = plan_texts(args.plans)
    with tempfile.TemporaryDirectory(prefix="gpu_check_rm_") as folder:
        set_seed(0)
        model = LlamaForSequenceClassification(config)
        params = non_embedding_params(model)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        write_input_spec(folder, InputSpec("plan_text", args.seq_len, None))
        del model
        default_dtype = resolve_dtype(ScoringSettings().dtype, args.device)
        for dtype in ("fp32", "bf16"):
            reset_peak(args.device)
            settings = ScoringSettings(device=args.device, batch_size=args.score_batch_size, dtype=dtype)
            scorer = scorer_for(folder, settings)
            scorer.score(questions[:64], plans[:64])  # warm-up
            sync(args.device)
            start = time.perf_counter()
            scores, lengths = scorer.score_with_lengths(questions, plans)
            sync(args.device)
            seconds = time.perf_counter() - start
            tokens = sum(lengths)
            mean_len = tokens / len(lengths)
            per_token = flops_per_token(params, config.num_hidden_layers, config.hidden_size, round(mean_len), 2, 4)
            per_plan = per_token * mean_len
            ceiling = args.peak_tflops * 1e12 / per_plan
            memory, memory_source = peak_memory_gib(args.device)
            print(f"-- {dtype}: {len(scores)} plans, {tokens} tokens read (mean {mean_len:.0f}) in {seconds:.3f} s")
            print(f"  ceiling: (2 x {params / 1e6:.2f}M params + 4 x {config.num_hidden_layers} layers x "
                  f"{config.hidden_size} hidden x {mean_len:.0f} tokens) = {per_token / 1e9:.4g} GFLOP/token x "
                  f"{mean_len:.0f} tokens per plan = {per_plan / 1e9:.4g} GFLOP/plan, at {args.peak_tflops:g} "
                  f"TFLOP/s dense bf16 ({args.card}) -> {ceiling:.4g} plans/s")
            if dtype == "fp32":
                print(f"  fp32 without tensor cores: at {args.peak_tflops_fp32:g} TFLOP/s fp32 ({args.card}) -> "
                      f"{args.peak_tflops_fp32 * 1e12 / per_plan:.4g} plans/s (TF32 matmuls, when enabled, sit between)")
            report.figure(f"score.{dtype}.plans_per_s", len(scores) / seconds, "plans/s", ceiling)
            report.figure(f"score.{dtype}.peak_memory", memory, "GiB", what=memory_source)
            if dtype == default_dtype:
                print(f"  orchrm's default dtype on {args.device} (ScoringSettings.dtype auto) is {dtype}:")
                report.figure("orchrm.score.plans_per_s", len(scores) / seconds, "plans/s", ceiling)


# --- 3. generation ----------------------------------------------------------------------------------------------------

def generate_section(args, tokenizer, report: Report):
    from transformers import LlamaForCausalLM, set_seed

    print(f"\n== 3. a GRPO step's generation: model.generate, bf16, sampling, {args.max_new_tokens} new tokens "
          f"(forced), batches {args.gen_batches} ==")
    config = model_config(tokenizer, shape_of(args))
    set_seed(0)
    model = LlamaForCausalLM(config).to(dtype=torch.bfloat16).to(args.device).eval()
    tokenizer.padding_side = "left"
    questions, _ = plan_texts(max(args.gen_batches))
    prompts = [f"Write a plan of agents that answers the question.\n{q}\nPlan:\n" for q in questions]
    for batch_size in args.gen_batches:
        encoded = tokenizer(prompts[:batch_size], return_tensors="pt", padding=True).to(args.device)
        prompt_len = encoded["input_ids"].shape[1]

        def generate(new_tokens):
            with torch.inference_mode():
                return model.generate(**encoded, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                                      temperature=1.0, top_p=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id)

        generate(min(8, args.max_new_tokens))  # warm-up
        sync(args.device)
        start = time.perf_counter()
        out = generate(args.max_new_tokens)
        sync(args.device)
        seconds = time.perf_counter() - start
        new = (out.shape[1] - prompt_len) * batch_size
        print(f"-- batch {batch_size}: {new} new tokens after a {prompt_len}-token prompt in {seconds:.3f} s "
              f"({1000 * seconds / args.max_new_tokens:.2f} ms a decode step)")
        ceiling = decode_ceiling(args, model, batch_size, prompt_len + args.max_new_tokens / 2)
        report.figure(f"generate.batch{batch_size}.tokens_per_s", new / seconds, "tokens/s", ceiling)
    memory, memory_source = peak_memory_gib(args.device)
    report.figure("generate.peak_memory", memory, "GiB", what=memory_source)


def decode_ceiling(args, model, batch_size: int, mean_cache_tokens: float) -> float:
    """Tokens/s when a decode step takes the time of reading its bytes from HBM: every weight once (bf16; the tied LM
    head is the embedding, counted once) and the KV cache so far (its mean over the decode), printed with its sum."""
    config = model.config
    params = non_embedding_params(model)
    head = config.vocab_size * config.hidden_size
    head_dim = config.hidden_size // config.num_attention_heads
    kv_per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * 2  # bytes, bf16
    weight_bytes = (params + head) * 2
    kv_bytes = batch_size * mean_cache_tokens * kv_per_token
    step_bytes = weight_bytes + kv_bytes
    ceiling = batch_size * args.hbm_tbps * 1e12 / step_bytes
    print(f"  ceiling (decode is memory-bandwidth-bound, not FLOP-bound): a step reads the weights "
          f"({params / 1e6:.2f}M + {head / 1e6:.2f}M LM head) x 2 bytes = {weight_bytes / 1e6:.1f} MB + the KV "
          f"cache, {batch_size} x {mean_cache_tokens:.0f} mean tokens x {kv_per_token} B = "
          f"{kv_bytes / 1e6:.1f} MB; {batch_size} tokens / ({step_bytes / 1e6:.1f} MB / {args.hbm_tbps:g} TB/s "
          f"HBM ({args.card})) -> {ceiling:.4g} tokens/s")
    return ceiling


# --- 4. orchrm's reward-model training --------------------------------------------------------------------------------

def orchrm_train_section(args, tokenizer, report: Report):
    from orchrm_dagster.rm.config import RMTrainConfig
    from orchrm_dagster.rm.data import PairTexts
    from orchrm_dagster.rm.template import encode
    from orchrm_dagster.rm.train import train_reward_model

    shapes = ["tiny"] if args.tiny else args.train_shapes
    print(f"\n== 4. orchrm's reward-model training: train_reward_model, RMTrainConfig's defaults but the backbone "
          f"and device, {args.rm_pairs} pairs of generated plans; backbones {shapes} ==")
    pairs = generated_pairs(args.rm_pairs)
    for shape in shapes:
        with tempfile.TemporaryDirectory(prefix="gpu_check_backbone_") as folder:
            params, config = save_backbone(tokenizer, shape, folder, args.device)
            rm_config = RMTrainConfig(backbone=folder, device=args.device)
            spec = rm_config.input_spec()
            sides = [len(ids) for texts in (pairs.chosen_plan, pairs.rejected_plan)
                     for ids in encode(tokenizer, pairs.question, texts, spec)]
            reset_peak(args.device)
            result = train_reward_model(pairs, PairTexts.empty(), rm_config, os.path.join(folder, "trained"),
                                        resume=False)
            memory, memory_source = peak_memory_gib(args.device)
        mean_side = sum(sides) / len(sides)
        per_token = flops_per_token(params, config.num_hidden_layers, config.hidden_size, round(mean_side), 6, 12)
        per_pair = per_token * 2 * mean_side
        ceiling = args.peak_tflops * 1e12 / per_pair
        print(f"-- {shape}: {params / 1e6:.2f}M non-embedding params; {result.train_pairs} pairs, {result.steps} steps "
              f"in {result.seconds:.3f} s (the training call, its first step's warm-up included), last loss "
              f"{result.final_loss:.4f}; {spec.max_length}-token inputs, mean {mean_side:.0f} a side")
        print(f"  ceiling: (6 x {params / 1e6:.2f}M params + 12 x {config.num_hidden_layers} layers x "
              f"{config.hidden_size} hidden x {mean_side:.0f} seq) = {per_token / 1e9:.4g} GFLOP/token x 2 x "
              f"{mean_side:.0f} tokens per pair = {per_pair / 1e12:.4g} TFLOP/pair (padding not counted), at "
              f"{args.peak_tflops:g} TFLOP/s dense bf16 ({args.card}) -> {ceiling:.4g} pairs/s")
        report.figure(f"orchrm.train.{shape}.pairs_per_s", result.pairs_per_second, "pairs/s", ceiling)
        report.figure(f"orchrm.train.{shape}.peak_memory", memory, "GiB", what=memory_source)


def generated_pairs(n: int):
    """`n` win-lose pairs of generated plans (which side wins does not matter to throughput)."""
    from orchrm_dagster.rm.data import PairTexts

    questions, plans = plan_texts(2 * n)
    return PairTexts(pair_id=[f"p{i}" for i in range(n)], question=questions[:n], chosen_plan=plans[:n],
                     rejected_plan=plans[n:], source=["gpu_check"] * n)


def save_backbone(tokenizer, shape: str, folder: str, device: str):
    """A random causal LM of `shape` and the tokenizer saved in `folder` (a reward model's backbone: loaded as a
    sequence classifier, it gets a fresh score head); (its non-embedding parameters, its config)."""
    from transformers import LlamaForCausalLM, set_seed

    config = model_config(tokenizer, shape)
    set_seed(0)
    with torch.device(device):  # a 1B model initialises in seconds on a GPU, in minutes on a CPU
        model = LlamaForCausalLM(config)
    params = non_embedding_params(model.model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return params, config


# --- 5. the round's own generation ------------------------------------------------------------------------------------

def orchrm_generate_section(args, tokenizer, report: Report):
    from transformers import LlamaForCausalLM, set_seed

    from orchrm_dagster.llm import ChatRequest, SamplingSettings, loaded_model, sample_rows
    from orchrm_dagster.llm.cache_kind import resolved_cache_kind
    from orchrm_dagster.plans import TextBounds, plan_grammar_ebnf

    group = args.group_size
    auto = resolved_cache_kind("auto", args.device)
    print(f"\n== 5. the round's own generation: sample_rows (PlanSampler's call), bf16, a group of {group} plans of "
          f"at most {args.plan_tokens} tokens and {args.max_agents} agents, plan grammar on, temperature 1; decoding "
          f"cache auto ({auto}) and {'growing' if auto == 'static' else 'static'} ==")
    set_seed(0)
    model = LlamaForCausalLM(model_config(tokenizer, shape_of(args))).to(dtype=torch.bfloat16).to(args.device).eval()
    lm = loaded_model(model, tokenizer)
    messages = ({"role": "user", "content": orchestrator_prompt(SPEED_QUESTION, args.max_agents)},)
    grammar = plan_grammar_ebnf(max_agents=args.max_agents, bounds=TextBounds.fit(args.plan_tokens, args.max_agents))

    def requests(first_seed: int) -> list:
        return [ChatRequest(messages, SamplingSettings(temperature=1.0, max_new_tokens=args.plan_tokens,
                                                       seed=first_seed + i), grammar=grammar) for i in range(group)]

    reset_peak(args.device)
    for cache in (auto, "growing" if auto == "static" else "static"):
        started = time.perf_counter()
        sample_rows(lm, requests(1000), group, cache)  # the first call: grammar, compilation, CUDA graphs
        sync(args.device)
        first = time.perf_counter() - started
        started = time.perf_counter()
        rows = sample_rows(lm, requests(0), group, cache)
        sync(args.device)
        seconds = time.perf_counter() - started
        failed = [row for row in rows if not hasattr(row, "tokens")]
        if failed:
            raise RuntimeError(f"the round's decoding failed: {failed[0].error}")
        tokens, prompt_len = sum(len(row.tokens) for row in rows), len(rows[0].prompt_ids)
        longest = max(len(row.tokens) for row in rows)
        name = "orchrm.generate" + (f".group{group}" if cache == auto else f".group{group}.{cache}")
        print(f"-- {cache} cache{' (auto)' if cache == auto else ''}: {tokens} plan tokens (longest plan {longest}) "
              f"after a {prompt_len}-token prompt in {seconds:.3f} s; the first call {first:.3f} s")
        ceiling = decode_ceiling(args, model, group, prompt_len + longest / 2)
        report.figure(f"{name}.tokens_per_s", tokens / seconds, "tokens/s", ceiling)
        report.figure(f"{name}.first_call_s", first, "s")
    memory, memory_source = peak_memory_gib(args.device)
    report.figure("orchrm.generate.peak_memory", memory, "GiB", what=memory_source)


def orchestrator_prompt(question: str, max_agents: int) -> str:
    """The round's prompt (the few-shot orchestrator's, as GRPO's dataset renders it) by orchrm's own render_prompt,
    its module loaded alone: the mas package's agents import the storage stack (duckdb), which a GPU image lacks."""
    path = ROOT / "orchrm_dagster" / "mas" / "prompts" / "__init__.py"
    spec = importlib.util.spec_from_file_location("orchrm_prompts", path)
    prompts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prompts)
    return prompts.render_prompt("orchestrator_fewshot", question=question, max_agents=max_agents)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: --device cuda was asked for, but torch sees no CUDA device "
              f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); run on a GPU machine, or pass "
              "--device cpu [--tiny]", file=sys.stderr)
        return 2
    if args.device == "cuda":
        name = torch.cuda.get_device_name(0)
    else:
        name = f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"
    import transformers

    print(f"gpu_check: device {args.device}: {name}; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; {'tiny config' if args.tiny else f'the {args.shape} shape'}")
    print(f"ceilings from: {args.peak_tflops:g} TFLOP/s dense bf16, {args.peak_tflops_fp32:g} TFLOP/s fp32, "
          f"{args.hbm_tbps:g} TB/s HBM ({args.card}){' - datasheet figures of a GPU, not of this CPU' if args.device == 'cpu' else ''}")
    started = time.perf_counter()
    tokenizer = load_tokenizer()
    report = Report()
    sections = {"train": train_section, "score": score_section, "generate": generate_section,
                "orchrm_train": orchrm_train_section, "orchrm_generate": orchrm_generate_section}
    for name in args.sections.split(","):
        section_started = time.perf_counter()
        if section_started - started > args.budget_s:
            print(f"\n== {name}: skipped, {section_started - started:.0f} s into the check (--budget-s "
                  f"{args.budget_s:g})")
            continue
        sections[name](args, tokenizer, report)
        report.figure(f"{name}.seconds", time.perf_counter() - section_started, "s")
    report.table()
    print(f"gpu_check: done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
