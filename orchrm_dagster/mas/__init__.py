"""Sub-agents and the plan executor of MAS-Orchestra plans (pure Python, no Dagster import).

Names load lazily (`orchrm_dagster.lazy_names`)."""

from __future__ import annotations

from orchrm_dagster.lazy_names import lazy_names

_EXPORTS = {
    "AGENTS": "agents",
    "AgentContext": "agents",
    "AgentError": "agents",
    "AgentOutput": "agents",
    "AgentSettings": "agents",
    "AgentTimeout": "agents",
    "CallRecord": "agents",
    "CoTAgent": "agents",
    "DebateAgent": "agents",
    "ReflexionAgent": "agents",
    "SCAgent": "agents",
    "SubAgent": "agents",
    "WebSearchAgent": "agents",
    "extract_answer": "answers",
    "majority_index": "answers",
    "ExecutionResult": "executor",
    "execute_plan": "executor",
    "fill_references": "executor",
    "is_prompt_file": "prompts",
    "load_prompt": "prompts",
    "render_prompt": "prompts",
    "question_text": "questions",
    "SHIPPED_CORPORA": "retrieval",
    "BM25Retriever": "retrieval",
    "Retriever": "retrieval",
    "load_retriever": "retrieval",
    "read_corpus": "retrieval",
}
__getattr__, __dir__, __all__ = lazy_names(__name__, _EXPORTS)
