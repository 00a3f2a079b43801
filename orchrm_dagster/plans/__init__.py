"""MAS-Orchestra orchestration plans: typed model, parser/renderer, decoding grammar (pure Python)."""

from orchrm_dagster.plans.grammar import TextBounds, plan_grammar_ebnf
from orchrm_dagster.plans.model import (
    AGENT_ID_RE,
    KNOWN_AGENTS,
    PLAN_ERROR_CODES,
    REFERENCE_RE,
    AgentSpec,
    Plan,
    PlanError,
    check_agent,
    references_in,
    validate_plan,
)
from orchrm_dagster.plans.parser import parse_plan, render_plan

__all__ = [
    "AGENT_ID_RE",
    "KNOWN_AGENTS",
    "PLAN_ERROR_CODES",
    "REFERENCE_RE",
    "TextBounds",
    "AgentSpec",
    "Plan",
    "PlanError",
    "check_agent",
    "parse_plan",
    "plan_grammar_ebnf",
    "references_in",
    "render_plan",
    "validate_plan",
]
