"""bench/gpu_check.sh, the prepared GPU check, runs end to end on the CPU in its tiny mode and prints every figure."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.sh"
FIGURES = {
    "train": ["train.full.pairs_per_s", "train.full.peak_memory", "train.lora.pairs_per_s", "train.lora.peak_memory"],
    "score": ["score.fp32.plans_per_s", "score.fp32.peak_memory", "score.bf16.plans_per_s", "score.bf16.peak_memory"],
    "generate": ["generate.batch8.tokens_per_s", "generate.batch32.tokens_per_s", "generate.peak_memory"],
}


@pytest.mark.slow
def test_tiny_mode_prints_every_figure_and_its_ceiling():
    result = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--tiny"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    figures = {m[1]: float(m[2]) for m in re.finditer(r"^figure: (\S+) = (\S+) ", out, re.MULTILINE)}
    for section, keys in FIGURES.items():
        for key in keys:
            assert key in figures, f"{section}: no figure line for {key}\n{out[-3000:]}"
            assert figures[key] > 0, f"{key} = {figures[key]}"
    assert out.count("ceiling: (6 x") == 1 and out.count("ceiling: (4 x") == 1  # training, full and LoRA
    assert out.count("ceiling: (2 x") == 2  # scoring, fp32 and bf16
    assert out.count("memory-bandwidth-bound") == 2  # generation, batch 8 and 32
    assert "989 TFLOP/s dense bf16 (H100 SXM)" in out and "3.35 TB/s HBM (H100 SXM)" in out
    assert "== summary ==" in out


def test_asking_for_cuda_without_one_fails_clearly():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = subprocess.run(["bash", str(SCRIPT), "--device", "cuda"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert "no CUDA device" in result.stderr
