"""bench/gpu_check.sh, the prepared GPU check, runs end to end on the CPU in its tiny mode and prints every figure,
orchrm's own paths beside the plain loops; the tokenizer it carries to a GPU machine is the embedded SmolLM2's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.sh"
ENV = {**os.environ, "PYTHON": sys.executable}  # the check runs in the tests' own environment
FIGURES = {
    "train": ["train.full.pairs_per_s", "train.full.peak_memory", "train.lora.pairs_per_s", "train.lora.peak_memory"],
    "score": ["score.fp32.plans_per_s", "score.fp32.peak_memory", "score.bf16.plans_per_s", "score.bf16.peak_memory"],
    "generate": ["generate.batch8.tokens_per_s", "generate.batch32.tokens_per_s", "generate.peak_memory"],
    "orchrm_train": ["orchrm.train.tiny.pairs_per_s", "orchrm.train.tiny.peak_memory"],
    "orchrm_score": ["orchrm.score.plans_per_s"],
    "orchrm_generate": ["orchrm.generate.group16.tokens_per_s", "orchrm.generate.group16.first_call_s",
                        "orchrm.generate.group16.static.tokens_per_s", "orchrm.generate.peak_memory"],
}


@pytest.mark.slow
def test_tiny_mode_prints_every_figure_and_its_ceiling():
    result = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--tiny"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    figures = {m[1]: float(m[2]) for m in re.finditer(r"^figure: (\S+) = (\S+) ", out, re.MULTILINE)}
    for section, keys in FIGURES.items():
        for key in keys:
            assert key in figures, f"{section}: no figure line for {key}\n{out[-3000:]}"
            assert figures[key] > 0, f"{key} = {figures[key]}"
    assert out.count("ceiling: (6 x") == 2 and out.count("ceiling: (4 x") == 1  # training: full, orchrm's; LoRA
    assert out.count("ceiling: (2 x") == 2  # scoring, fp32 and bf16
    assert out.count("memory-bandwidth-bound") == 4  # generation, batch 8 and 32; the round's, both caches
    assert "989 TFLOP/s dense bf16 (H100 SXM)" in out and "3.35 TB/s HBM (H100 SXM)" in out
    assert "== summary ==" in out


def test_asking_for_cuda_without_one_fails_clearly():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = subprocess.run(["bash", str(SCRIPT), "--device", "cuda"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=ENV)
    assert result.returncode != 0
    assert "no CUDA device" in result.stderr


def test_the_carried_tokenizer_is_small_and_encodes_as_the_embedded_gguf():
    from transformers import AutoTokenizer

    from orchrm_dagster.llm import EMBEDDED_GGUF, embedded_model_dir

    folder = ROOT / "bench" / "tokenizer"
    assert sum(path.stat().st_size for path in folder.iterdir()) < 4 * 2**20
    carried = AutoTokenizer.from_pretrained(str(folder))
    embedded = AutoTokenizer.from_pretrained(str(embedded_model_dir()), gguf_file=EMBEDDED_GGUF)
    chat = [{"role": "user", "content": "Plan for: what is 12 + 30? <thinking>Use a ${1} agent.</thinking>"}]
    assert carried.apply_chat_template(chat, tokenize=False) == embedded.apply_chat_template(chat, tokenize=False)
    text = carried.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert carried(text)["input_ids"] == embedded(text)["input_ids"]
    assert (carried.eos_token_id, carried.pad_token_id, len(carried)) == (embedded.eos_token_id,
                                                                          embedded.pad_token_id, len(embedded))
