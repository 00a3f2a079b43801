"""Hypothesis strategies for plan tests: valid DAG plans and tag-soup texts."""

from __future__ import annotations

from hypothesis import strategies as st

from orchrm_dagster.plans import KNOWN_AGENTS, AgentSpec, Plan, render_plan

# free text: no '<' (cannot smuggle a tag), no '$' / braces (cannot form a ${ID} reference)
_free = st.text(st.characters(blacklist_characters="<${}", blacklist_categories=("Cs",)), max_size=30).map(str.strip)
_role = st.text(st.characters(blacklist_characters="<,\n", blacklist_categories=("Cs",)), min_size=1, max_size=12
                ).map(str.strip).filter(bool)
_id = st.from_regex(r"[A-Za-z0-9_.\-]{1,8}", fullmatch=True)


def _rarely(one_in: int):
    """True about once in ``one_in`` draws (st.integers would favour its bounds)."""
    return st.sampled_from([False] * (one_in - 1) + [True])


@st.composite
def valid_plans(draw, max_agents: int = 7, digit_ids: bool = False, shuffle: bool = True) -> Plan:
    """A valid plan: agents 1..n reference only earlier agents, edges match, the last one is the sink."""
    if draw(_rarely(8)):
        answer = draw(_free.filter(bool))
        return Plan(thinking=draw(_free), direct_answer=answer)
    n = draw(st.integers(1, max_agents))
    if digit_ids:
        ids = [str(i) for i in range(1, n + 1)]
    else:
        ids = draw(st.lists(_id, min_size=n, max_size=n, unique=True))
    consumed: set[str] = set()
    agents, edges = [], []
    for k, agent_id in enumerate(ids):
        earlier = ids[:k]
        refs = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3)) if earlier else []
        if k == n - 1:  # single sink: the last agent consumes every agent nobody else consumes
            refs += [i for i in earlier if i not in consumed and i not in refs]
        consumed.update(refs)
        pieces = []
        for ref in refs:
            pieces.append(draw(_free))
            pieces.append("${" + ref + "}")
        pieces.append(draw(_free))
        agent_input = " ".join(p for p in pieces if p).strip()
        name = draw(st.sampled_from(KNOWN_AGENTS))
        roles = tuple(draw(st.lists(_role, min_size=1, max_size=4))) if name == "DebateAgent" else ()
        agents.append(AgentSpec(agent_id, name, draw(_free), agent_input, roles))
        edges += [(ref, agent_id) for ref in refs]
    if shuffle:
        agents = draw(st.permutations(agents))
        edges = draw(st.permutations(edges))
    return Plan(thinking=draw(_free), agents=tuple(agents), edges=tuple(edges))


FRAGMENTS = (
    "<thinking>", "</thinking>", "<agent>", "</agent>", "<agent_id>", "</agent_id>", "<agent_name>",
    "</agent_name>", "<agent_description>", "</agent_description>", "<required_arguments>",
    "</required_arguments>", "<agent_input>", "</agent_input>", "<debate_roles>", "</debate_roles>",
    "<edge>", "</edge>", "<from>", "</from>", "<to>", "</to>", "<answer>", "</answer>",
    "${1}", "${2}", "${3}", "${", "}", "$", "1", "2", "3", "a b", "CoTAgent", "DebateAgent", "SCAgent",
    ", ", "\n", " ", "```", "```xml\n", "<", ">",
)

_TAGS = ("thinking", "agent_id", "agent_name", "agent_description", "required_arguments", "agent_input",
         "debate_roles", "from", "to", "answer", "edge")
_atom = st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4))
_tag_pair = st.builds(lambda tag, inner: f"<{tag}>{''.join(inner)}</{tag}>",
                      st.sampled_from(_TAGS), st.lists(_atom, max_size=4))
_agent_soup = st.lists(st.one_of(_tag_pair, _atom), max_size=8).map(lambda p: "<agent>" + "".join(p) + "</agent>")

# random sequences of tag fragments, well-formed tag pairs and agent-like blocks
tag_soup = st.lists(st.one_of(_atom, _tag_pair, _agent_soup), max_size=30).map("".join)


@st.composite
def random_graph_plans(draw) -> str:
    """Well-formed tags around a random graph (cycles, several sinks, mismatched edges...)."""
    ids = draw(st.lists(st.sampled_from("12345"), min_size=1, max_size=5, unique=True))
    if draw(_rarely(10)):
        ids.append(draw(st.sampled_from(ids)))  # duplicate id
    blocks, pairs = [], []
    for agent_id in ids:
        refs = draw(st.lists(st.sampled_from("123456" if draw(_rarely(10)) else ids), max_size=3))
        name = "NoSuchAgent" if draw(_rarely(20)) else draw(st.sampled_from(KNOWN_AGENTS))
        blocks.append(f"<agent><agent_id>{agent_id}</agent_id><agent_name>{name}</agent_name>"
                      f"<required_arguments><agent_input>{' '.join('${' + r + '}' for r in refs)}</agent_input>"
                      "</required_arguments></agent>")
        pairs += [(r, agent_id) for r in refs if not draw(_rarely(20))]  # now and then an edge is missing
    pairs += draw(st.lists(st.tuples(st.sampled_from("123456"), st.sampled_from("123456")), max_size=1))
    pairs = draw(st.permutations(pairs))
    edge = "".join(f"<from>{a}</from><to>{b}</to>" for a, b in pairs)
    edge = "" if draw(_rarely(20)) else f"<edge>{edge}</edge>"
    return "<thinking>t</thinking>" + "".join(blocks) + edge


@st.composite
def mutated_plans(draw) -> str:
    """A rendered valid plan with a few random cuts, insertions and duplications."""
    text = render_plan(draw(valid_plans(max_agents=4, digit_ids=draw(st.booleans()))))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        op = draw(st.sampled_from(("cut", "insert", "dup")))
        if op == "cut":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(FRAGMENTS)) + text[i:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text
