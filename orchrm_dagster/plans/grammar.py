"""A constrained-decoding grammar for orchestrator plans (xgrammar / GBNF EBNF syntax).

``plan_grammar_ebnf()`` returns text for ``xgrammar.Grammar.from_ebnf`` (root rule ``root``). It
admits the canonical layout that :func:`orchrm_dagster.plans.parser.render_plan` writes:

* a ``<thinking>`` block of free text without '<', then either
* ``<answer>...</answer>`` (free text without '<', not all whitespace), or
* 1..``max_agents`` ``<agent>`` blocks with ids "1", "2", ... in order, ``agent_name`` one of
  ``known_agents``, a description without '<', an ``agent_input`` that mixes free text (no '<',
  no '$') with references ``${k}`` to *earlier* agents only, optional ``<debate_roles>``; then one
  ``<edge>`` block of ``<from>i</from><to>j</to>`` lines.

Up to ``EXACT_GRAPH_MAX_AGENTS`` agents every admitted text is a valid plan: the grammar carries the
graph built so far as its state (which earlier agents each agent references), so the edge block it
allows is exactly the references, and it only lets the plan end when every agent but the last feeds
a later one (one sink). Beyond that the states grow as 2^(n^2/2), so larger plans get a looser grammar
in which edges merely point forward and ``parse_plan`` still judges edges == references and one sink.
Free text excludes '<' so that no tag of the format can be smuggled into a field.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchrm_dagster.plans.model import KNOWN_AGENTS

NL = "\n"
EXACT_GRAPH_MAX_AGENTS = 4
# Tokens the fixed tags cost, measured with SmolLM2's tokenizer on the longest plans the grammar admits
# (every agent with debate roles, every edge present): 96, 196, 314 and 450 tokens for 1 to 4 agents, which is
# exactly 14 per plan + 82 per agent + 18 per edge (an edge line and its ${ID} reference). Rounded up, so other
# BPE tokenizers fit too.
TAG_TOKENS_PER_PLAN = 16
TAG_TOKENS_PER_AGENT = 84
TAG_TOKENS_PER_EDGE = 20


@dataclass(frozen=True)
class TextBounds:
    """Most characters each free-text field may hold. A small model otherwise rambles inside the first field
    until it runs out of tokens and never closes the tag."""

    thinking: int = 240
    text: int = 100  # a description, a direct answer's halves
    roles: int = 40
    agent_input: int = 160

    @classmethod
    def fit(cls, max_new_tokens: int, max_agents: int) -> TextBounds:
        """Bounds under which the longest plan the grammar admits fits in max_new_tokens, counting one token per
        character (true of ASCII under byte-level BPE; other scripts can cost more and may still truncate)."""
        edges = max_agents * (max_agents - 1) // 2
        fixed = TAG_TOKENS_PER_PLAN + TAG_TOKENS_PER_AGENT * max_agents + TAG_TOKENS_PER_EDGE * edges
        free = max_new_tokens - fixed
        if free < 40 * (max_agents + 1):
            raise ValueError(f"max_new_tokens={max_new_tokens} is too small for plans of up to {max_agents} agents "
                             f"under the grammar: the tags alone take {fixed} tokens; give at least "
                             f"{fixed + 40 * (max_agents + 1)}")
        thinking = min(free // 5, 1000)
        per_agent = (free - thinking) // max_agents
        text = min(per_agent // 4, 200)
        roles = min(per_agent // 6, 40)
        return cls(thinking=thinking, text=text, roles=roles, agent_input=min(per_agent - text - roles, 600))


def _lit(s: str) -> str:
    """An EBNF string literal for ``s``."""
    escaped = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def _alts(options) -> str:
    return " | ".join(_lit(o) for o in options)


def plan_grammar_ebnf(known_agents: tuple[str, ...] = KNOWN_AGENTS, max_agents: int = EXACT_GRAPH_MAX_AGENTS,
                      bounds: TextBounds = TextBounds()) -> str:
    """EBNF (xgrammar dialect) for plans with at most ``max_agents`` agents and free text within ``bounds``
    (``TextBounds.fit`` sizes them to a token budget); see the module docstring."""
    names = tuple(known_agents)
    if not names or any(not isinstance(a, str) or not a or "<" in a for a in names):
        raise ValueError("known_agents must be non-empty names without '<'")
    if not isinstance(max_agents, int) or max_agents < 1:
        raise ValueError("max_agents must be an int >= 1")

    rules = [
        "# MAS-Orchestra orchestration plan (canonical layout of orchrm_dagster.plans.render_plan).",
        f"thinking ::= {_lit('<thinking>')} thinking_text {_lit('</thinking>' + NL)}",
        f"answer ::= {_lit('<answer>')} free_text [^< \\t\\r\\n] free_text {_lit('</answer>')}",
        f"thinking_text ::= [^<]{{0,{bounds.thinking}}}",
        f"free_text ::= [^<]{{0,{bounds.text}}}",
        "input_char ::= [^<$]",
        f"agent_name ::= {_alts(names)}",
        f"debate_roles ::= {_lit('<debate_roles>')} [^<]{{0,{bounds.roles}}} {_lit('</debate_roles>' + NL)}",
    ]
    if max_agents <= EXACT_GRAPH_MAX_AGENTS:
        rules += _exact_graph_rules(max_agents, bounds.agent_input)
    else:
        rules += _forward_edge_rules(max_agents, bounds.agent_input)
    return "\n".join(rules) + "\n"


def _agent_rule(name: str, k: int, input_rule: str) -> str:
    head = _lit(f"<agent>{NL}<agent_id>{k}</agent_id>{NL}<agent_name>")
    after_name = _lit(f"</agent_name>{NL}<agent_description>")
    after_description = _lit(f"</agent_description>{NL}<required_arguments>{NL}<agent_input>")
    tail = _lit(f"</required_arguments>{NL}</agent>{NL}")
    return (f"{name} ::= {head} agent_name {after_name} free_text {after_description} "
            f"{input_rule} {_lit('</agent_input>' + NL)} debate_roles? {tail}")


def _edge_line(i: int, j: int) -> str:
    return f"<from>{i}</from><to>{j}</to>{NL}"


def _edge_block(edges) -> str:
    return _lit(f"<edge>{NL}" + "".join(_edge_line(i, j) for i, j in edges) + "</edge>")


def _exact_graph_rules(max_agents: int, max_input_chars: int) -> list[str]:
    """A state is the tuple of reference sets of agents 1..k; each agent's input holds exactly its references,
    in increasing order, between bounded runs of free text (together at most max_input_chars)."""
    rules = ["# Exact graph: edges are the references, and the plan ends only with one sink.",
             "root ::= thinking (answer | s_1)"]
    agent_rules: dict[tuple[int, tuple[int, ...]], str] = {}

    def agent_rule(k: int, refs: tuple[int, ...]) -> str:
        name = f"agent_{k}_refs_" + ("_".join(map(str, refs)) or "none")
        if (k, refs) not in agent_rules:
            segment = f"input_char{{0,{max_input_chars // (len(refs) + 1)}}}"
            parts = [segment] + [f"{_lit('${' + str(r) + '}')} {segment}" for r in refs]
            agent_rules[(k, refs)] = _agent_rule(name, k, "(" + " ".join(parts) + ")")
        return name

    def state_name(refs_by_agent: tuple[tuple[int, ...], ...]) -> str:
        return f"s_{len(refs_by_agent) + 1}" + "".join("_" + ("".join(map(str, r)) or "x") for r in refs_by_agent)

    def visit(refs_by_agent: tuple[tuple[int, ...], ...]) -> None:
        """refs_by_agent: the references of agents 1..k-1; this state's rule writes agent k onward."""
        k = len(refs_by_agent) + 1
        fed = {r for refs in refs_by_agent for r in refs}
        options = []
        for refs in _subsets(range(1, k)):
            graph = refs_by_agent + (refs,)
            ends = fed | set(refs) >= set(range(1, k))  # every agent before k feeds a later one: k is the sink
            can_grow = k < max_agents
            alternatives = ([_edge_block(_edges(graph))] if ends else []) + ([state_name(graph)] if can_grow else [])
            if not alternatives:
                continue
            options.append(f"{agent_rule(k, refs)} ({' | '.join(alternatives)})")
            if can_grow:
                visit(graph)
        rules.append(f"{state_name(refs_by_agent)} ::= " + " | ".join(options))

    visit(())
    return rules + list(agent_rules.values())


def _subsets(items) -> list[tuple[int, ...]]:
    items = list(items)
    return [tuple(x for bit, x in enumerate(items) if mask >> bit & 1) for mask in range(2 ** len(items))]


def _edges(refs_by_agent: tuple[tuple[int, ...], ...]) -> list[tuple[int, int]]:
    return [(i, j) for j, refs in enumerate(refs_by_agent, start=1) for i in refs]


def _forward_edge_rules(max_agents: int, max_input_chars: int) -> list[str]:
    rules = ["# Loose graph: edges point forward; edges == references and one sink are checked by parse_plan.",
             "root ::= thinking (answer | agents_1)"]
    for k in range(1, max_agents + 1):
        rest = f"(edges_{k} | agents_{k + 1})" if k < max_agents else f"edges_{k}"
        rules.append(f"agents_{k} ::= agent_{k} {rest}")
        if k == 1:
            rules.append(_agent_rule("agent_1", 1, f"input_char{{0,{max_input_chars}}}"))
            rules.append(f"edges_1 ::= {_edge_block([])}")
        else:
            rules.append(_agent_rule(f"agent_{k}", k, f"(input_char | ref_{k}){{0,{max_input_chars}}}"))
            rules.append(f"ref_{k} ::= {_alts('${' + str(i) + '}' for i in range(1, k))}")
            rules.append(f"edges_{k} ::= {_lit(f'<edge>{NL}')} edge_{k}* {_lit('</edge>')}")
            pairs = (_edge_line(i, j) for j in range(2, k + 1) for i in range(1, j))
            rules.append(f"edge_{k} ::= {_alts(pairs)}")
    return rules
