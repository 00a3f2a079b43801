"""Artifact contract v1: one record per orchestration run (see docs/artifact-format.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchrm_dagster.contract.kinds import PolicyKind

CONTRACT_VERSION = "1"
DEFAULT_ENVIRONMENT = "agents"  # a run record without `environment` was executed by real sub-agents


class _Strict(BaseModel):
    # strict: a number is not a string and "3" is not an int; extra: unknown fields are kept, not rejected
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class Policy(_Strict):
    name: str = Field(min_length=1)
    kind: PolicyKind
    step: int | None = None


class SubagentCall(_Strict):
    agent_id: str
    agent_name: str | None = None
    input: str | None = None
    output: str | None = None
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    model: str | None = None


class TokenCounts(_Strict):
    orchestrator: int | None = Field(default=None, ge=0)
    subagents: int | None = Field(default=None, ge=0)
    orchestrator_prompt: int | None = Field(default=None, ge=0)
    orchestrator_completion: int | None = Field(default=None, ge=0)
    subagent_prompt: int | None = Field(default=None, ge=0)
    subagent_completion: int | None = Field(default=None, ge=0)


class RunRecord(_Strict):
    run_id: str = Field(min_length=1)
    problem_id: str = Field(min_length=1)
    benchmark: str = Field(min_length=1)
    question: str
    policy: Policy
    plan: str
    reference_answer: str | None = None
    sample_index: int | None = None
    final_answer: str | None = None
    subagents: list[SubagentCall] | None = None
    tokens: TokenCounts | None = None
    plan_logprob: float | None = None
    is_correct: bool | None = None
    error: str | None = None
    created_at: datetime | None = None
    meta: dict[str, Any] | None = None
    # where the plan was executed (orchrm_dagster.environments): real sub-agents ("agents", also what a record
    # without the field means) or a simulated truth ("simulated")
    environment: str | None = Field(default=None, min_length=1)


REQUIRED_FIELDS = tuple(name for name, f in RunRecord.model_fields.items() if f.is_required())
