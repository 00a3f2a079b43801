"""Parse and render MAS-Orchestra plan text (docs/method.md section 2).

``parse_plan`` treats its input purely as data (no eval/exec), never raises on a ``str``, and runs
in linear time: it scans with ``str.find`` (bounded to the enclosing block) and two regular
expressions without nested or backtracking quantifiers.

Tolerance: text outside the tags (chat around the plan, code fences) is ignored; whitespace inside
tags is stripped; sub-tags of an ``<agent>`` may come in any order; ``<required_arguments>`` may be
left out (then ``<agent_input>`` / ``<debate_roles>`` are looked up directly in the ``<agent>``);
duplicate edges count once. Tag names are case-sensitive and take no attributes.
"""

from __future__ import annotations

import re

from orchrm_dagster.plans.model import (
    KNOWN_AGENTS,
    AgentSpec,
    Plan,
    PlanError,
    check_agent,
    validate_plan,
)

_EDGE_TAG_RE = re.compile(r"<(from|to)>")
_ROLE_SPLIT_RE = re.compile(r"[,\n]")

_Block = tuple[int, int, int]  # (inner start, inner end, index just after the closing tag)


def _block(text: str, tag: str, start: int, end: int) -> _Block | PlanError | None:
    """The first ``<tag>...</tag>`` inside ``text[start:end]``: None if there is no opening tag."""
    opening = text.find(f"<{tag}>", start, end)
    if opening < 0:
        return None
    inner = opening + len(tag) + 2
    closing = text.find(f"</{tag}>", inner, end)
    if closing < 0:
        return PlanError("unclosed_tag", f"<{tag}> at offset {opening} is not closed")
    return inner, closing, closing + len(tag) + 3


def _field(text: str, tag: str, start: int, end: int, where: str, required: bool) -> str | PlanError | None:
    found = _block(text, tag, start, end)
    if isinstance(found, PlanError):
        return PlanError("unclosed_tag", f"{where}: <{tag}> is not closed")
    if found is None:
        return PlanError("missing_tag", f"{where} has no <{tag}>") if required else None
    return text[found[0]:found[1]].strip()


def _parse_agent(text: str, start: int, end: int, n: int, known_agents) -> AgentSpec | PlanError:
    where = f"agent block #{n}"
    agent_id = _field(text, "agent_id", start, end, where, required=True)
    if isinstance(agent_id, PlanError):
        return agent_id
    where = f"agent {agent_id[:80]!r} (block #{n})"
    name = _field(text, "agent_name", start, end, where, required=True)
    if isinstance(name, PlanError):
        return name
    description = _field(text, "agent_description", start, end, where, required=False)
    if isinstance(description, PlanError):
        return description
    arguments = _block(text, "required_arguments", start, end)
    if isinstance(arguments, PlanError):
        return PlanError("unclosed_tag", f"{where}: <required_arguments> is not closed")
    arg_start, arg_end = (start, end) if arguments is None else arguments[:2]
    agent_input = _field(text, "agent_input", arg_start, arg_end, where, required=True)
    if isinstance(agent_input, PlanError):
        return agent_input
    roles = _field(text, "debate_roles", arg_start, arg_end, where, required=False)
    if roles is None and arguments is not None:
        roles = _field(text, "debate_roles", start, end, where, required=False)
    if isinstance(roles, PlanError):
        return roles
    debate_roles = tuple(r for r in (p.strip() for p in _ROLE_SPLIT_RE.split(roles or "")) if r)
    spec = AgentSpec(agent_id=agent_id, agent_name=name, description=description or "",
                     agent_input=agent_input, debate_roles=debate_roles)
    # per-agent checks now, so that the first bad block is the one reported
    return check_agent(spec, known_agents, n) or spec


def _parse_edges(text: str, start: int, end: int) -> list[tuple[str, str]] | PlanError:
    edges: list[tuple[str, str]] = []
    pending: str | None = None
    pos = start
    while True:
        m = _EDGE_TAG_RE.search(text, pos, end)
        if m is None:
            break
        tag = m.group(1)
        closing = text.find(f"</{tag}>", m.end(), end)
        if closing < 0:
            return PlanError("unclosed_tag", f"<{tag}> at offset {m.start()} in <edge> is not closed")
        value = text[m.end():closing].strip()
        pos = closing + len(tag) + 3
        if tag == "from":
            if pending is not None:
                return PlanError("missing_tag", f"<edge>: <from>{pending[:80]}</from> has no <to>")
            pending = value
        else:
            if pending is None:
                return PlanError("missing_tag", f"<edge>: <to>{value[:80]}</to> has no <from> before it")
            edges.append((pending, value))
            pending = None
    if pending is not None:
        return PlanError("missing_tag", f"<edge>: <from>{pending[:80]}</from> has no <to>")
    return list(dict.fromkeys(edges))


def parse_plan(text: str, *, known_agents: tuple[str, ...] | None = KNOWN_AGENTS,
               max_chars: int | None = 200_000) -> Plan | PlanError:
    """Parse orchestrator output into a valid :class:`Plan`, or say why it is not one.

    ``known_agents=None`` accepts any agent name; ``max_chars=None`` sets no length limit.
    Never raises on a ``str`` (a non-``str`` gives ``PlanError("empty", ...)``).
    """
    if not isinstance(text, str):
        return PlanError("empty", f"a plan is text, got {type(text).__name__}")
    if max_chars is not None and len(text) > max_chars:
        return PlanError("too_long", f"plan has {len(text)} characters, more than {max_chars}")
    if not text.strip():
        return PlanError("empty", "plan text is empty")
    n = len(text)

    # <thinking> (optional): taken first when it opens before any <agent> / <answer>, so that
    # thinking which mentions the other tags does not confuse the rest.
    thinking, pos = "", 0
    opening = text.find("<thinking>")
    if opening >= 0:
        first_other = [i for i in (text.find("<agent>", 0, opening), text.find("<answer>", 0, opening)) if i >= 0]
        if not first_other:
            found = _block(text, "thinking", opening, n)
            if isinstance(found, PlanError):
                return found
            thinking, pos = text[found[0]:found[1]].strip(), found[2]

    if text.find("<agent>", pos) < 0:
        found = _block(text, "answer", pos, n)
        if isinstance(found, PlanError):
            return found
        if found is None:
            return PlanError("no_agents", "no <agent> block and no <answer>")
        plan = Plan(thinking=thinking, direct_answer=text[found[0]:found[1]].strip())
        return validate_plan(plan, known_agents) or plan

    agents: list[AgentSpec] = []
    seen: set[str] = set()
    outside: list[tuple[int, int]] = []  # spans between agent blocks, where <edge> may be
    while True:
        opening = text.find("<agent>", pos)
        if opening < 0:
            break
        inner = opening + len("<agent>")
        closing = text.find("</agent>", inner)
        if closing < 0:
            return PlanError("unclosed_tag", f"agent block #{len(agents) + 1} (<agent> at offset {opening}) "
                                             "is not closed")
        if text.find("<agent>", inner, closing) >= 0:
            return PlanError("unclosed_tag", f"agent block #{len(agents) + 1} (<agent> at offset {opening}) "
                                             "is not closed before the next <agent>")
        outside.append((pos, opening))
        spec = _parse_agent(text, inner, closing, len(agents) + 1, known_agents)
        if isinstance(spec, PlanError):
            return spec
        if spec.agent_id in seen:
            return PlanError("duplicate_agent_id", f"agent id {spec.agent_id!r} is used twice")
        seen.add(spec.agent_id)
        agents.append(spec)
        pos = closing + len("</agent>")
    outside.append((pos, n))

    edges: list[tuple[str, str]] | None = None
    for start, end in reversed(outside):  # after the agents first: the usual place
        found = _block(text, "edge", start, end)
        if found is None:
            continue
        if isinstance(found, PlanError):
            return found
        parsed = _parse_edges(text, found[0], found[1])
        if isinstance(parsed, PlanError):
            return parsed
        edges = parsed
        break
    if edges is None:
        if len(agents) > 1:
            return PlanError("missing_tag", f"{len(agents)} agents but no <edge> block")
        edges = []

    plan = Plan(thinking=thinking, agents=tuple(agents), edges=tuple(edges))
    return validate_plan(plan, known_agents) or plan


def render_plan(plan: Plan) -> str:
    """The canonical tagged text of ``plan`` (the layout ``plan_grammar_ebnf`` admits).

    ``parse_plan(render_plan(p)) == p`` for every valid plan whose text fields are stripped,
    whose debate roles are non-empty and contain no ',' or newline, and whose free text holds no
    tag of the format (text without '<' is always safe). No escaping is done.
    """
    parts = [f"<thinking>\n{plan.thinking}\n</thinking>"]
    if plan.is_direct:
        parts.append(f"<answer>{plan.direct_answer}</answer>")
        return "\n".join(parts)
    for agent in plan.agents:
        roles = f"<debate_roles>{', '.join(agent.debate_roles)}</debate_roles>\n" if agent.debate_roles else ""
        parts.append(
            "<agent>\n"
            f"<agent_id>{agent.agent_id}</agent_id>\n"
            f"<agent_name>{agent.agent_name}</agent_name>\n"
            f"<agent_description>{agent.description}</agent_description>\n"
            "<required_arguments>\n"
            f"<agent_input>{agent.agent_input}</agent_input>\n"
            f"{roles}"
            "</required_arguments>\n"
            "</agent>"
        )
    edges = "".join(f"<from>{a}</from><to>{b}</to>\n" for a, b in plan.edges)
    parts.append(f"<edge>\n{edges}</edge>")
    return "\n".join(parts)
