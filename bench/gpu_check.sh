#!/usr/bin/env bash
# A prepared GPU check (issues 32, 39): reward-model training pairs/s and memory (a plain loop, full and LoRA, and
# orchrm's train_reward_model at the 135M and 1B shapes), scoring plans/s (orchrm's RewardScorer, fp32 vs bf16), a GRPO
# step's generation tokens/s (model.generate, and the round's own decoding on a static and a growing cache), each
# beside its ceiling. See bench/gpu_check.py for the arguments.
#   bash bench/gpu_check.sh --peak-tflops 989 --hbm-tbps 4.8 --card H200  # one CUDA device (within 5 min on an H200)
#   bash bench/gpu_check.sh --device cpu --tiny  # the same code on the CPU, tiny config, under 2 minutes
# On a GPU machine without the project's environment, carry .whl/ (bash bench/gpu_wheels.sh): the wheels the check
# needs are installed from it (to /tmp/gpu_check_site) when the python lacks them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
needed="import trl, datasets, xgrammar, pydantic, orjson"
if ! "$python" -c "$needed" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site \
    .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/gpu_check_site"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false HF_HUB_DISABLE_PROGRESS_BARS=1
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::FutureWarning}"
exec "$python" bench/gpu_check.py "$@"
