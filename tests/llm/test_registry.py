"""The backend registry: a backend defined and registered in one place runs everywhere a spec does; configs name a
backend by `kind` and are refused, naming the kind and the field, when they are wrong."""

from __future__ import annotations

import pkgutil
from typing import ClassVar, Literal, get_args

import pydantic
import pytest

import orchrm_dagster.llm as llm
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm import (BackendSpec, ChatRequest, Completion, LLMSettings, TransformersSpec, backend_kinds,
                                build_backend, register_backend, respec, spec_class)
from orchrm_dagster.llm import registry
from orchrm_dagster.environments import executor_for
from orchrm_dagster.orchestration import ExecutionSettings, PlanJob, PolicySpec

PLAN = """<thinking>one solver</thinking>
<agent><agent_id>1</agent_id><agent_name>CoTAgent</agent_name><agent_description>solve</agent_description>
<required_arguments><agent_input></agent_input></required_arguments></agent>
<edge></edge>"""


class EchoBackend:
    """Answers every request with its last user message."""

    name = "echo"
    batches_in_process = True  # so that concurrent plans reach it through the coalescing path

    def __init__(self, prefix: str):
        self.model_id = f"echo:{prefix}"
        self.prefix = prefix
        self.batch_sizes: list[int] = []

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.batch_sizes.append(len(requests))
        return [Completion(self.prefix + _last_user_message(r), 1, 1) for r in requests]


def _last_user_message(request: ChatRequest) -> str:
    return next(m["content"] for m in reversed(request.messages) if m["role"] == "user")


@engine_config
class EchoSpec:
    """A toy backend: echoes the prompt."""

    kind: Literal["echo"] = Field(default="echo", kw_only=True, description="The backend kind")
    prefix: str = Field(description="Put before every echo")

    loads_model_folders: ClassVar[bool] = False

    def build(self) -> EchoBackend:
        return EchoBackend(self.prefix)


@pytest.fixture
def echo_registered(monkeypatch):
    monkeypatch.setattr(registry.BACKENDS, "_entries", dict(registry.BACKENDS.all()))  # registered for this test only
    register_backend(EchoSpec)


def test_a_registered_backend_builds_and_executes_plans(echo_registered):
    assert "echo" in backend_kinds() and spec_class("echo") is EchoSpec
    backend = build_backend(EchoSpec(prefix="heard: "))
    assert build_backend(EchoSpec(prefix="heard: ")) is backend  # one backend per spec and process
    jobs = [PlanJob(f"What is {i} + {i}?", PLAN, "math", seed=i) for i in range(4)]
    results = executor_for(ExecutionSettings(concurrent_plans=4), lambda: backend).execute(jobs)
    assert all(r.error is None and r.final_answer.startswith("heard: ") for r in results)
    assert all(f"What is {i} + {i}?" in r.final_answer for i, r in enumerate(results))
    assert sum(backend.batch_sizes) == 4  # one CoT call per plan


def test_a_policy_can_move_the_subagents_backend_to_a_registered_kind(echo_registered):
    policy = PolicySpec(name="p", backend_kind="echo")
    with pytest.raises(pydantic.ValidationError, match="prefix"):  # the echo kind's own required field
        policy.backend_spec(TransformersSpec())
    assert respec(TransformersSpec(), "echo", prefix=">") == EchoSpec(prefix=">")


def test_every_backend_module_registers_one_spec_and_the_config_union_takes_them_all():
    modules = {module.name for module in pkgutil.iter_modules(llm.__path__)} - set(registry.BACKENDS.skip)
    registered = [spec_class(kind).__module__.rsplit(".", 1)[1] for kind in backend_kinds()]
    assert sorted(registered) == sorted(modules) and all(name.endswith("_backend") for name in modules)
    union = get_args(get_args(BackendSpec)[0])
    assert {spec.__pydantic_fields__["kind"].default for spec in union} == set(backend_kinds())


def test_a_spec_class_without_a_kind_literal_or_with_a_taken_kind_is_refused(monkeypatch):
    monkeypatch.setattr(registry.BACKENDS, "_entries", dict(registry.BACKENDS.all()))

    @engine_config
    class NoKind:
        model: str = Field(default="m", description="m")

        def build(self):
            return None

    @engine_config
    class SecondTransformers:
        kind: Literal["transformers"] = Field(default="transformers", description="k")
        loads_model_folders: ClassVar[bool] = True

        def build(self):
            return None

    with pytest.raises(TypeError, match=r"NoKind needs .*kind: Literal"):
        register_backend(NoKind)
    with pytest.raises(ValueError, match="'transformers' is registered already, by TransformersSpec"):
        register_backend(SecondTransformers)


@pytest.mark.parametrize("backend, names", [
    ({"kind": "nope"}, ["'nope'", "transformers", "openai", "vllm"]),
    ({"kind": "openai", "base_url": "http://h/v1"}, ["openai.model", "Field required"]),
    ({"kind": "openai", "base_url": "http://h/v1", "model": "m", "device": "cpu"},
     ["openai.device", "Unexpected keyword argument"]),
    ({"kind": "transformers", "tensor_parallel_size": 2}, ["transformers.tensor_parallel_size"]),
])
def test_a_config_names_the_kind_and_the_field_it_gets_wrong(backend, names):
    with pytest.raises(pydantic.ValidationError) as refused:
        LLMSettings(backend=backend)
    assert all(name in str(refused.value) for name in names), str(refused.value)


def test_a_policy_naming_an_unknown_kind_or_a_field_its_kind_lacks_is_refused():
    with pytest.raises(ValueError, match="unknown backend kind 'nope'; known: openai, transformers, vllm"):
        PolicySpec(name="p", backend_kind="nope")
    with pytest.raises(ValueError, match="TransformersSpec .*'transformers'.* has no field base_url"):
        PolicySpec(name="p", base_url="http://h/v1").backend_spec(TransformersSpec())
