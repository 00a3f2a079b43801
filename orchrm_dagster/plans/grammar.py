"""A constrained-decoding grammar for orchestrator plans (xgrammar / GBNF EBNF syntax).

``plan_grammar_ebnf()`` returns text for ``xgrammar.Grammar.from_ebnf`` (root rule ``root``). It
admits exactly the canonical layout that :func:`orchrm_dagster.plans.parser.render_plan` writes:

* a ``<thinking>`` block of free text without '<', then either
* ``<answer>...</answer>`` (free text without '<', not all whitespace), or
* 1..``max_agents`` ``<agent>`` blocks with ids "1", "2", ... in order, ``agent_name`` one of
  ``known_agents``, a description without '<', an ``agent_input`` that mixes free text (no '<',
  no '$') with references ``${k}`` to *earlier* agents only, optional ``<debate_roles>``; then one
  ``<edge>`` block of ``<from>i</from><to>j</to>`` lines with i < j <= the number of agents
  (empty for a single agent).

Because references and edges only point forward, the graph is acyclic by construction. What a
context-free grammar cannot express, and what ``parse_plan`` still judges, is that the edges match
the references one to one (no "edge_without_reference" / "reference_without_edge") and that there
is exactly one sink. Every text the grammar admits parses (``parse_plan``) into agents and edges
of the right shape; only those graph checks can still reject it. Free text excludes '<' so that no
tag of the format can be smuggled into a field.
"""

from __future__ import annotations

from orchrm_dagster.plans.model import KNOWN_AGENTS


def _lit(s: str) -> str:
    """An EBNF string literal for ``s``."""
    escaped = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def _alts(options) -> str:
    return " | ".join(_lit(o) for o in options)


def plan_grammar_ebnf(known_agents: tuple[str, ...] = KNOWN_AGENTS, max_agents: int = 4,
                      max_thinking_chars: int = 400, max_text_chars: int = 160, max_input_chars: int = 240) -> str:
    """EBNF (xgrammar dialect) for plans with at most ``max_agents`` agents; see the module docstring.

    Free text is bounded (thinking, descriptions, inputs): a small model otherwise rambles inside the
    first free-text field until it runs out of tokens and never closes the tag."""
    names = tuple(known_agents)
    if not names or any(not isinstance(a, str) or not a or "<" in a for a in names):
        raise ValueError("known_agents must be non-empty names without '<'")
    if not isinstance(max_agents, int) or max_agents < 1:
        raise ValueError("max_agents must be an int >= 1")

    nl = "\n"
    rules = [
        "# MAS-Orchestra orchestration plan (canonical layout of orchrm_dagster.plans.render_plan).",
        "# Exact DAG validity (edges == references, one sink) is checked by parse_plan, not here.",
        "root ::= thinking (answer | agents_1)",
        f"thinking ::= {_lit('<thinking>')} thinking_text {_lit('</thinking>' + nl)}",
        f"answer ::= {_lit('<answer>')} free_text [^< \\t\\r\\n] free_text {_lit('</answer>')}",
        f"thinking_text ::= [^<]{{0,{max_thinking_chars}}}",
        f"free_text ::= [^<]{{0,{max_text_chars}}}",
        "input_char ::= [^<$]",
        f"agent_name ::= {_alts(names)}",
        f"debate_roles ::= {_lit('<debate_roles>')} free_text {_lit('</debate_roles>' + nl)}",
    ]
    for k in range(1, max_agents + 1):
        rest = f"(edges_{k} | agents_{k + 1})" if k < max_agents else f"edges_{k}"
        rules.append(f"agents_{k} ::= agent_{k} {rest}")
        head = _lit(f"<agent>{nl}<agent_id>{k}</agent_id>{nl}<agent_name>")
        after_name = _lit(f"</agent_name>{nl}<agent_description>")
        after_description = _lit(f"</agent_description>{nl}<required_arguments>{nl}<agent_input>")
        after_input = _lit(f"</agent_input>{nl}")
        tail = _lit(f"</required_arguments>{nl}</agent>{nl}")
        rules.append(f"agent_{k} ::= {head} agent_name {after_name} free_text {after_description} "
                     f"input_{k} {after_input} debate_roles? {tail}")
        if k == 1:
            rules.append(f"input_1 ::= input_char{{0,{max_input_chars}}}")
            rules.append(f"edges_1 ::= {_lit(f'<edge>{nl}</edge>')}")
        else:
            rules.append(f"input_{k} ::= (input_char | ref_{k}){{0,{max_input_chars}}}")
            rules.append(f"ref_{k} ::= {_alts('${' + str(i) + '}' for i in range(1, k))}")
            rules.append(f"edges_{k} ::= {_lit(f'<edge>{nl}')} edge_{k}* {_lit('</edge>')}")
            pairs = (f"<from>{i}</from><to>{j}</to>{nl}" for j in range(2, k + 1) for i in range(1, j))
            rules.append(f"edge_{k} ::= {_alts(pairs)}")
    return "\n".join(rules) + "\n"
