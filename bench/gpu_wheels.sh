#!/usr/bin/env bash
# The wheels bench/gpu_check.sh needs on a GPU machine whose image lacks them (its Python 3.12 has torch 2.11,
# transformers 5.17, peft, accelerate, pandas, pyarrow, fsspec, xxhash, psutil, httpx, but not these), downloaded into
# .whl/ (git-ignored; carry it: it travels as a carried path, about 9 MB of the 64 MiB a call may carry). The versions
# are this environment's, the ones the project is tested with. gpu_check.sh installs them when its python lacks them.
#   bash bench/gpu_wheels.sh          # then run the check with .whl carried
# Not carried, and not needed: duckdb and polars (24 + 55 MB; the check's modules do not import them), dagster, vLLM
# (far over the limit, and it pins another torch).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
packages=(trl datasets dill multiprocess xgrammar apache-tvm-ffi pydantic pydantic-core annotated-types
          typing-inspection typing-extensions orjson)
pinned=()
for package in "${packages[@]}"; do
  pinned+=("$package==$("$python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$package")")
done
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
mkdir -p .whl
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl "${pinned[@]}"
du -sh .whl
