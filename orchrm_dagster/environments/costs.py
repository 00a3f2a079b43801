"""Sub-agent token costs for simulated executions: per agent type, the mean prompt and completion tokens of one call,
measured on real runs of the embedded sub-agents (`bench/mas_execute.py --costs-out`, which wrote the shipped file
with its provenance), and how many calls an agent makes under the execution's agent settings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

from orchrm_dagster.plans import KNOWN_AGENTS, AgentSpec

SHIPPED_COSTS = Path(str(files("orchrm_dagster") / "data" / "environments" / "subagent_costs.json"))


@dataclass(frozen=True)
class CallCost:
    prompt_tokens: int  # mean prompt tokens of one call
    completion_tokens: int  # mean completion tokens of one call (before the execution's budget caps it)


@dataclass(frozen=True)
class SubagentCosts:
    by_agent: dict[str, CallCost]
    source: str  # where the figures come from, as the file says (shown beside simulated numbers)
    reflexion_calls_per_round: float = 2.0  # critic + refine; measured lower where the critic accepted early

    def call(self, agent_name: str) -> CallCost:
        return self.by_agent[agent_name]


@cache
def load_costs(path: str | None = None) -> SubagentCosts:
    """The costs file (the shipped measurement when `path` is None). ValueError naming the file and the field for a
    file that lacks an agent type or holds a negative or non-integer figure."""
    source = Path(path) if path else SHIPPED_COSTS
    data = json.loads(source.read_text())
    agents = data.get("agents")
    if not isinstance(agents, dict):
        raise ValueError(f"{source}: field 'agents' must be an object of agent type -> costs")
    by_agent = {}
    for name in KNOWN_AGENTS:
        entry = agents.get(name)
        if not isinstance(entry, dict):
            raise ValueError(f"{source}: agents.{name}: missing (every agent type of the plan format needs a cost)")
        by_agent[name] = CallCost(*(_count(source, f"agents.{name}.{key}", entry.get(key))
                                    for key in ("prompt_tokens_per_call", "completion_tokens_per_call")))
    return SubagentCosts(by_agent, str(data.get("source", {}).get("summary", source.name)),
                         _reflexion_calls_per_round(source, data))


def _reflexion_calls_per_round(source: Path, data: dict) -> float:
    """What one critic + refine round cost in calls where measured: (calls per agent - the first attempt) / rounds."""
    measured = data["agents"]["ReflexionAgent"].get("calls_per_agent")
    rounds = data.get("source", {}).get("agent_settings", {}).get("reflexion_rounds")
    if measured is None or not rounds:
        return 2.0
    return max(0.0, (_count(source, "agents.ReflexionAgent.calls_per_agent", measured * 100) / 100 - 1) / rounds)


def _count(source: Path, field: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{source}: {field}: must be a number >= 0, got {value!r}")
    return round(value)


def calls_of(agent: AgentSpec, agents, retrieval: bool, costs: SubagentCosts) -> int:
    """LLM calls one agent of the plan makes under the agent settings `agents` (mas.AgentSettings), as the sub-agents
    in orchrm_dagster/mas/agents.py make them; ReflexionAgent's rounds at the measured calls per round (its critic
    stops it early when it accepts)."""
    name = agent.agent_name
    if name == "SCAgent":
        return agents.sc_samples
    if name == "DebateAgent":
        return len(agent.debate_roles or agents.debate_roles) * agents.debate_rounds + 1
    if name == "ReflexionAgent":
        return 1 + round(costs.reflexion_calls_per_round * agents.reflexion_rounds)
    if name == "WebSearchAgent":
        return 2 if retrieval else 1
    return 1
