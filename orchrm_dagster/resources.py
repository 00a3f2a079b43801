"""Dagster resources: where the data lives. Defaults run on the embedded setup (a local folder)."""

from __future__ import annotations

from dataclasses import replace

import dagster as dg
from pydantic import Field

from orchrm_dagster.storage.root import StorageRoot, default_storage_url
from orchrm_dagster.storage.warehouse import Warehouse


class StorageResource(dg.ConfigurableResource):
    """The storage root: a local folder (default `storage/`, or ORCHRM_STORAGE) or `s3://bucket/prefix`."""

    root: str = Field(default="storage", description="Local folder or s3://bucket/prefix")
    s3_endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (MinIO, moto, ...)")
    warehouse_path: str | None = Field(
        default=None, description="DuckDB file; default <root>/warehouse.duckdb for a local root"
    )

    def storage_root(self) -> StorageRoot:
        return StorageRoot(self.root, self.s3_endpoint_url)

    def warehouse(self) -> Warehouse:
        return Warehouse(self.storage_root(), self.warehouse_path)


def default_storage_resource() -> StorageResource:
    return StorageResource(root=default_storage_url())


class LLMBackendResource(dg.ConfigurableResource):
    """The LLM the sub-agents run on (and the default for orchestrator policies). Switching backends is config:
    `transformers` (embedded SmolLM2 on the CPU by default), `openai` (any OpenAI-compatible server such as
    `vllm serve`), or `vllm` (in-process engine; needs the `gpu` extra)."""

    kind: str = Field(default="transformers", description="transformers | openai | vllm")
    model: str | None = Field(default=None, description="Model path or name; unset = the embedded SmolLM2")
    gguf_file: str | None = None
    base_url: str | None = Field(default=None, description="OpenAI-compatible server, e.g. http://host:8000/v1")
    api_key_env: str | None = "OPENAI_API_KEY"
    max_batch_size: int = 8
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 4
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    dtype: str = "auto"

    def spec(self):
        from orchrm_dagster.llm.factory import BackendSpec

        return BackendSpec(kind=self.kind, model=self.model, gguf_file=self.gguf_file, base_url=self.base_url,
                           api_key_env=self.api_key_env, max_batch_size=self.max_batch_size,
                           max_concurrency=self.max_concurrency, timeout_s=self.timeout_s,
                           max_retries=self.max_retries, tensor_parallel_size=self.tensor_parallel_size,
                           gpu_memory_utilization=self.gpu_memory_utilization, dtype=self.dtype)

    def backend(self):
        from orchrm_dagster.llm.factory import build_backend

        return build_backend(self.spec())


class PolicyConfig(dg.Config):
    name: str
    kind: str = Field(default="base", description="base | specialized | checkpoint")
    backend_kind: str | None = Field(default=None, description="Overrides of the sub-agents' backend (llm resource);")
    model: str | None = Field(default=None, description="unset fields inherit from it")
    base_url: str | None = None
    prompt: str = "orchestrator"
    checkpoint_path: str | None = None
    step: int | None = None
    temperature: float = 1.0
    max_new_tokens: int = 640
    grammar: bool = True
    max_agents: int = 3


class PolicyRegistry(dg.ConfigurableResource):
    """The orchestrator policies; each is a partition key of the `policies` dimension."""

    policies: list[PolicyConfig]

    def spec(self, name: str, default_backend: LLMBackendResource):
        from orchrm_dagster.orchestration.policy import PolicySpec

        for policy in self.policies:
            if policy.name == name:
                overrides = {"kind": policy.backend_kind, "model": policy.model, "base_url": policy.base_url}
                backend = replace(default_backend.spec(), **{k: v for k, v in overrides.items() if v is not None})
                return PolicySpec(name=policy.name, kind=policy.kind, backend=backend, prompt=policy.prompt,
                                  checkpoint_path=policy.checkpoint_path, step=policy.step,
                                  temperature=policy.temperature, max_new_tokens=policy.max_new_tokens,
                                  grammar=policy.grammar, max_agents=policy.max_agents)
        raise KeyError(f"no policy named {name!r} in the policy registry (known: "
                       f"{', '.join(p.name for p in self.policies)})")


def embedded_policies() -> PolicyRegistry:
    """The embedded default: SmolLM2 as a base orchestrator, and the same model with a few-shot prompt as a
    stand-in 'specialized' one until a trained orchestrator (a GRPO checkpoint) exists."""
    return PolicyRegistry(policies=[
        PolicyConfig(name="smollm2-base", kind="base", prompt="orchestrator", temperature=1.0),
        PolicyConfig(name="smollm2-fewshot", kind="specialized", prompt="orchestrator_fewshot", temperature=0.7),
    ])
