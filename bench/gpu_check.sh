#!/usr/bin/env bash
# A prepared GPU check (issue 32): reward-model training pairs/s and memory (full and LoRA), scoring plans/s (fp32 vs
# bf16) and a GRPO step's generation tokens/s, each beside its ceiling. See bench/gpu_check.py for the arguments.
#   bash bench/gpu_check.sh                      # one CUDA device, SmolLM2-135M's architecture (< 9 min on an H100)
#   bash bench/gpu_check.sh --device cpu --tiny  # the same code on the CPU, tiny config, well under a minute
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false HF_HUB_DISABLE_PROGRESS_BARS=1
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::FutureWarning}"
exec "$python" bench/gpu_check.py "$@"
