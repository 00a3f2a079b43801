"""Typed MAS-Orchestra orchestration plans (see docs/method.md section 2).

A :class:`Plan` is one of three forms:

* **direct answer**: ``direct_answer`` is set, no agents, no edges;
* **single delegation**: exactly one agent, no edges;
* **DAG**: several agents; ``edges`` ``(A, B)`` mean "B's ``agent_input`` contains ``${A}``", the
  graph is acyclic with exactly one sink (the agent whose output is the final answer).

The dataclasses do not validate the graph on construction (so that tests and generators can build
any plan); :func:`validate_plan` does, and :func:`orchrm_dagster.plans.parser.parse_plan` only ever
returns plans that pass it. Only the form invariant (a direct answer has no agents and no edges) is
enforced on construction. Pure Python: no Dagster import.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass

KNOWN_AGENTS: tuple[str, ...] = ("CoTAgent", "SCAgent", "DebateAgent", "ReflexionAgent", "WebSearchAgent")

PLAN_ERROR_CODES: tuple[str, ...] = (
    "empty",
    "missing_tag",
    "unclosed_tag",
    "no_agents",
    "duplicate_agent_id",
    "unknown_agent",
    "bad_agent_id",
    "cycle",
    "multiple_sinks",
    "dangling_reference",
    "edge_without_reference",
    "reference_without_edge",
    "unknown_edge_endpoint",
    "too_long",
)

# An agent id: 1-64 characters of letters, digits, '_', '.', '-' (MAS-Orchestra uses "1", "2", ...).
AGENT_ID_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
# A reference inside agent_input: ${ID}, whitespace inside the braces tolerated. Possessive
# quantifiers (Python >= 3.11): no backtracking, linear time on any input.
REFERENCE_RE = re.compile(r"\$\{[ \t\r\n]*+([A-Za-z0-9_.\-]++)[ \t\r\n]*+\}")


def references_in(agent_input: str) -> tuple[str, ...]:
    """Ids referenced as ``${ID}`` in ``agent_input``, in order of first appearance, deduplicated."""
    return tuple(dict.fromkeys(m.group(1) for m in REFERENCE_RE.finditer(agent_input)))


@dataclass(frozen=True)
class AgentSpec:
    agent_id: str
    agent_name: str
    description: str = ""
    agent_input: str = ""  # "" = the original question; ${ID} = the output of agent ID
    debate_roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.debate_roles, tuple):
            object.__setattr__(self, "debate_roles", tuple(self.debate_roles))

    @property
    def references(self) -> tuple[str, ...]:
        """Ids referenced as ``${ID}`` in ``agent_input``, in order, deduplicated."""
        return references_in(self.agent_input)


@dataclass(frozen=True)
class PlanError:
    """Why a text is not a valid plan. A value, not an exception: ``parse_plan`` returns it."""

    code: str
    message: str

    def __post_init__(self) -> None:
        if self.code not in PLAN_ERROR_CODES:
            raise ValueError(f"unknown PlanError code {self.code!r}")

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True)
class Plan:
    thinking: str = ""
    agents: tuple[AgentSpec, ...] = ()
    edges: tuple[tuple[str, str], ...] = ()
    direct_answer: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.agents, tuple):
            object.__setattr__(self, "agents", tuple(self.agents))
        edges = self.edges
        if not isinstance(edges, tuple) or any(not isinstance(e, tuple) for e in edges):
            object.__setattr__(self, "edges", tuple(tuple(e) for e in edges))
        if self.direct_answer is not None and (self.agents or self.edges):
            raise ValueError("a direct-answer plan has no agents and no edges")

    # -- form ---------------------------------------------------------------------------------
    @property
    def is_direct(self) -> bool:
        return self.direct_answer is not None

    @property
    def form(self) -> str:
        """``"direct"``, ``"single"`` (one agent, no edges) or ``"dag"``."""
        if self.is_direct:
            return "direct"
        return "single" if len(self.agents) == 1 and not self.edges else "dag"

    @property
    def agent_ids(self) -> tuple[str, ...]:
        return tuple(a.agent_id for a in self.agents)

    def agent(self, agent_id: str) -> AgentSpec:
        """The agent with this id (KeyError if none)."""
        for a in self.agents:
            if a.agent_id == agent_id:
                return a
        raise KeyError(agent_id)

    # -- graph --------------------------------------------------------------------------------
    @property
    def sink(self) -> str | None:
        """Id of the only agent without outgoing edges (its output is the final answer).

        ``None`` for a direct answer; ``ValueError`` if there is not exactly one such agent
        (impossible for a plan that :func:`validate_plan` accepts).
        """
        if self.is_direct:
            return None
        sources = {a for a, _ in self.edges}
        sinks = [a.agent_id for a in self.agents if a.agent_id not in sources]
        if len(sinks) != 1:
            raise ValueError(f"plan has {len(sinks)} sinks: {sinks}")
        return sinks[0]

    def topological_order(self) -> tuple[str, ...]:
        """Agent ids in an order where every edge goes forward; ties broken by order of appearance.

        ``()`` for a direct answer; ``ValueError`` on a cycle or an edge to an unknown id.
        """
        order, stuck = _kahn(self.agent_ids, self.edges)
        if stuck:
            raise ValueError(f"plan graph has a cycle through {sorted(stuck)}")
        return order


def _kahn(ids: tuple[str, ...], edges) -> tuple[tuple[str, ...], set[str]]:
    """Kahn's algorithm with a min-heap on appearance index: (order, ids left on a cycle)."""
    index: dict[str, int] = {}
    for k, agent_id in enumerate(ids):
        index.setdefault(agent_id, k)
    indegree = [0] * len(ids)
    successors: list[list[int]] = [[] for _ in ids]
    for a, b in dict.fromkeys(edges):
        if a not in index or b not in index:
            raise ValueError(f"edge {a!r} -> {b!r} has an endpoint that is not an agent")
        successors[index[a]].append(index[b])
        indegree[index[b]] += 1
    heap = [k for k in range(len(ids)) if indegree[k] == 0 and index[ids[k]] == k]
    heapq.heapify(heap)
    order: list[str] = []
    while heap:
        k = heapq.heappop(heap)
        order.append(ids[k])
        for s in successors[k]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(heap, s)
    stuck = set(index) - set(order)
    return tuple(order), stuck


def check_agent(agent: AgentSpec, known_agents: tuple[str, ...] | None = KNOWN_AGENTS,
                n: int | None = None) -> PlanError | None:
    """The checks on one agent alone: "bad_agent_id", then "unknown_agent" (skipped if known_agents is None)."""
    if not AGENT_ID_RE.fullmatch(agent.agent_id):
        block = "" if n is None else f" #{n}"
        return PlanError("bad_agent_id", f"agent{block} has id {agent.agent_id[:80]!r}; "
                                         "ids are 1-64 letters, digits, '_', '.', '-'")
    if known_agents is not None and agent.agent_name not in known_agents:
        return PlanError("unknown_agent", f"agent {agent.agent_id!r} is a {agent.agent_name[:80]!r}; "
                                          f"known agents: {', '.join(known_agents)}")
    return None


def validate_plan(plan: Plan, known_agents: tuple[str, ...] | None = KNOWN_AGENTS) -> PlanError | None:
    """``None`` if ``plan`` is a valid plan, else the first problem found.

    Checks, in order: empty direct answer ("empty"), no agents ("no_agents"), agent ids
    ("bad_agent_id"), agent names against ``known_agents`` ("unknown_agent"; skipped when
    ``known_agents`` is None), "duplicate_agent_id", "unknown_edge_endpoint",
    "dangling_reference", "edge_without_reference", "reference_without_edge", "cycle",
    "multiple_sinks".
    """
    if plan.is_direct:
        if not plan.direct_answer.strip():
            return PlanError("empty", "the <answer> is empty")
        return None
    if not plan.agents:
        return PlanError("no_agents", "the plan has no agent and no direct answer")
    seen: set[str] = set()
    for n, agent in enumerate(plan.agents, 1):
        problem = check_agent(agent, known_agents, n)
        if problem is not None:
            return problem
        if agent.agent_id in seen:
            return PlanError("duplicate_agent_id", f"agent id {agent.agent_id!r} is used twice")
        seen.add(agent.agent_id)
    edges = tuple(dict.fromkeys(plan.edges))
    for a, b in edges:
        for end in (a, b):
            if end not in seen:
                return PlanError("unknown_edge_endpoint",
                                 f"edge {a[:80]!r} -> {b[:80]!r}: {end[:80]!r} is not an agent")
    referenced: list[tuple[str, str]] = []
    for agent in plan.agents:
        for ref in agent.references:
            if ref not in seen:
                return PlanError("dangling_reference",
                                 f"agent {agent.agent_id!r} references ${{{ref[:80]}}}, which is not an agent")
            referenced.append((ref, agent.agent_id))
    reference_set = set(referenced)
    for a, b in edges:
        if (a, b) not in reference_set:
            return PlanError("edge_without_reference",
                             f"edge {a!r} -> {b!r} but agent {b!r}'s input has no ${{{a}}}")
    edge_set = set(edges)
    for a, b in referenced:
        if (a, b) not in edge_set:
            return PlanError("reference_without_edge", f"agent {b!r} uses ${{{a}}} but there is no edge {a!r} -> {b!r}")
    _, stuck = _kahn(plan.agent_ids, edges)
    if stuck:
        ordered = [i for i in plan.agent_ids if i in stuck]
        return PlanError("cycle", f"the agent graph has a cycle through {', '.join(ordered[:20])}")
    sources = {a for a, _ in edges}
    sinks = [i for i in plan.agent_ids if i not in sources]
    if len(sinks) != 1:
        return PlanError("multiple_sinks", f"{len(sinks)} agents have no outgoing edge ({', '.join(sinks[:20])}); "
                                           "exactly one must produce the final answer")
    return None
