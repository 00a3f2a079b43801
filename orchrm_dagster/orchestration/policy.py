"""Orchestrator policies: a backend + model (+ checkpoint) + prompt, with a kind the pair rules use."""

from __future__ import annotations

import hashlib

from orchrm_dagster.contract import PolicyKind
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm import BackendSpec, backend_kinds, model_folder_kind, respec, spec_class


@engine_config
class PolicySpec:
    """One orchestrator policy. Its backend is the sub-agents' backend (the `llm` resource) with the fields set
    here replacing theirs, so a policy names only what differs."""

    name: str = Field(description="Partition key of the `policies` dimension; part of every run_id")
    kind: PolicyKind = Field(default="base", description="base | specialized | checkpoint (the pair rules use it)")
    backend_kind: str | None = Field(default=None, description=f"Overrides the llm resource's backend kind "
                                                               f"({', '.join(backend_kinds())})")
    model: str | None = Field(default=None, description="Overrides the llm resource's model")
    base_url: str | None = Field(default=None, description="Overrides the llm resource's base_url")
    prompt: str = Field(default="orchestrator", description="The orchestrator's prompt: a prompt shipped in "
                                                            "orchrm_dagster/mas/prompts/ by name, or a file anywhere "
                                                            "(a path; `{question}` and `{max_agents}` are filled in)")
    checkpoint_path: str | None = Field(
        default=None, description="A fine-tuned orchestrator's folder; replaces the model")
    step: int | None = Field(default=None, description="Training step of a checkpoint policy")
    temperature: float = Field(default=1.0, description="Sampling temperature of plans")
    top_p: float = Field(default=1.0, description="Nucleus sampling of plans")
    max_new_tokens: int = Field(default=640, description="Token budget of one plan (the grammar fits within it)")
    grammar: bool = Field(default=True, description="Constrain plans to the plan grammar (xgrammar)")
    max_agents: int = Field(default=3, description="Most sub-agents a plan may use")

    def __post_init__(self) -> None:
        if self.backend_kind is not None:
            spec_class(self.backend_kind)  # an unknown kind is refused here, with the registered ones

    def backend_spec(self, subagent_backend: BackendSpec) -> BackendSpec:
        """The backend this policy samples plans from. A checkpoint is a model folder on this machine: unless the
        policy names a kind, it is sampled with the sub-agents' kind if that kind loads model folders, else with the
        default backend."""
        kind = self.backend_kind or (model_folder_kind(subagent_backend) if self.checkpoint_path
                                     else subagent_backend.kind)
        overrides = {"model": self.checkpoint_path or self.model, "base_url": self.base_url}
        return respec(subagent_backend, kind, **{k: v for k, v in overrides.items() if v is not None})


def sample_seed(seed: int, problem_id: str, sample_index: int) -> int:
    """A per-sample seed that does not depend on which other samples are drawn in the same call."""
    digest = hashlib.blake2b(f"{seed}|{problem_id}|{sample_index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def run_id_for(policy: PolicySpec, problem_id: str, seed: int, sample_index: int, run_tag: str = "") -> str:
    """Deterministic, so an interrupted run can resume without redoing finished samples. `run_tag` (a loop's
    rollouts: their execution's key) sets runs made for one purpose apart from the same plans made for another."""
    return f"{policy.name}/{problem_id}/seed{seed}{f'-x{run_tag}' if run_tag else ''}/{sample_index}"


# The embedded default: SmolLM2 as a base orchestrator, and the same model with a few-shot prompt as a stand-in
# "specialized" one until a trained orchestrator (a GRPO checkpoint) exists.
EMBEDDED_POLICIES = (PolicySpec(name="smollm2-base", kind="base", prompt="orchestrator", temperature=1.0),
                     PolicySpec(name="smollm2-fewshot", kind="specialized", prompt="orchestrator_fewshot",
                                temperature=0.7))
