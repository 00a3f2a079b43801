import importlib.util

import pytest

from orchrm_dagster.llm.vllm_backend import VLLMBackend


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_missing_vllm_gives_a_clear_error():
    with pytest.raises(ImportError, match=r"install the gpu extra: pip install -e '\.\[gpu\]'"):
        VLLMBackend("HuggingFaceTB/SmolLM2-135M-Instruct")
