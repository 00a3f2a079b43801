"""Orchestrator policies: a backend + model (+ checkpoint) + prompt, with a kind the pair rules use."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Literal

from orchrm_dagster.llm.factory import BackendSpec

PolicyKind = Literal["base", "specialized", "checkpoint"]


@dataclass(frozen=True)
class PolicySpec:
    name: str
    kind: PolicyKind = "base"
    backend: BackendSpec = field(default_factory=BackendSpec)
    prompt: str = "orchestrator"  # a prompt file in orchrm_dagster/mas/prompts/
    checkpoint_path: str | None = None  # a fine-tuned orchestrator; replaces backend.model
    step: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 640
    grammar: bool = True  # constrain plans to the plan grammar (xgrammar)
    max_agents: int = 3

    def resolved_backend(self) -> BackendSpec:
        return replace(self.backend, model=self.checkpoint_path) if self.checkpoint_path else self.backend


def sample_seed(seed: int, problem_id: str, sample_index: int) -> int:
    """A per-sample seed that does not depend on which other samples are drawn in the same call."""
    digest = hashlib.blake2b(f"{seed}|{problem_id}|{sample_index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def run_id_for(policy: PolicySpec, problem_id: str, seed: int, sample_index: int) -> str:
    """Deterministic, so an interrupted run can resume without redoing finished samples."""
    return f"{policy.name}/{problem_id}/seed{seed}/{sample_index}"
