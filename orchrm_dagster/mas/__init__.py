"""Sub-agents and the plan executor of MAS-Orchestra plans (pure Python, no Dagster import)."""

from orchrm_dagster.mas.agents import (
    AGENTS,
    AgentContext,
    AgentError,
    AgentOutput,
    AgentSettings,
    AgentTimeout,
    CallRecord,
    CoTAgent,
    DebateAgent,
    ReflexionAgent,
    SCAgent,
    SubAgent,
    WebSearchAgent,
)
from orchrm_dagster.mas.answers import extract_answer, majority_index
from orchrm_dagster.mas.executor import ExecutionResult, execute_plan, fill_references
from orchrm_dagster.mas.prompts import is_prompt_file, load_prompt, render_prompt
from orchrm_dagster.mas.questions import question_text
from orchrm_dagster.mas.retrieval import SHIPPED_CORPORA, BM25Retriever, Retriever, load_retriever, read_corpus

__all__ = [
    "AGENTS",
    "AgentContext",
    "AgentError",
    "AgentOutput",
    "AgentSettings",
    "AgentTimeout",
    "BM25Retriever",
    "CallRecord",
    "CoTAgent",
    "DebateAgent",
    "ExecutionResult",
    "ReflexionAgent",
    "Retriever",
    "SHIPPED_CORPORA",
    "SCAgent",
    "SubAgent",
    "WebSearchAgent",
    "execute_plan",
    "extract_answer",
    "fill_references",
    "is_prompt_file",
    "load_prompt",
    "load_retriever",
    "majority_index",
    "question_text",
    "read_corpus",
    "render_prompt",
]
