"""The one input format of the reward model, shared by training, scoring, Best-of-N and GRPO.

A plan is scored together with its question: r(x, z) reads `encode(tokenizer, [x], [z], spec)`. The plan's
structure is what is being judged, so the default format (`graph_first`) renders the parsed plan graph first:

    Question: <question, at most a third of the budget>
    Plan: 3 agents; edges 1->3, 2->3
    [1] CoTAgent: <description> | input: <agent_input>
    ...
    Thinking: <head of the thinking> ... <tail of the thinking>

Every agent (id, type, description, input, debate roles) and every edge reaches the model; what a long plan loses is
the middle of its thinking block (read up to `thinking_tokens`, head and tail, so a long thinking block costs no more
than a short one). A plan too large for even that keeps every agent's id,
type and input and every edge, with the descriptions cut to a common length (inputs too, only if that is not
enough). A plan that does not parse is read as its raw text, head and tail. `plan_text`, the format of reward models
trained before, reads the raw question + plan text, truncated at the end.

A decoder backbone trained as an instruct model may read the input in its chat template (`template="chat"`: the
whole input is one user message, the turn's tokens wrapped around it and counted in max_length); `plain` (the
default, and every encoder) reads it as text.

A checkpoint records its `InputSpec` (format, length, thinking budget, template; `input_format.json` beside the
weights), so the scorer reads plans exactly as the model learned to.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from orchrm_dagster.plans import Plan, parse_plan

InputFormat = Literal["graph_first", "plan_text"]
# plain: the input as text; chat: wrapped in the tokenizer's chat template as one user message (instruct decoders)
TemplateKind = Literal["plain", "chat"]
CHAT_MARK = "<<orchrm-input>>"  # stands for the input while the chat template is rendered around it
INPUT_FORMAT_FILE = "input_format.json"
TEMPLATE = "Question:\n{question}\n\nPlan:\n{plan}"
# plan_text: a long question may take at most this share of max_length, so that the plan is never left out.
QUESTION_SHARE = 1 / 3
# graph_first: the structure comes first, but the question keeps at least this many tokens.
QUESTION_FLOOR = 64
ELLIPSIS = " ... "


@dataclass(frozen=True)
class InputSpec:
    """How a reward model reads (question, plan): recorded with every checkpoint, used for training and scoring."""

    input_format: InputFormat = "graph_first"
    max_length: int = 512
    thinking_tokens: int | None = 128  # graph_first: most tokens of thinking read (its head and tail); None: any
    template: TemplateKind = "plain"  # chat: the input is one user message in the tokenizer's chat template

    def as_dict(self) -> dict:
        """The spec's fields, as recorded (`input_format.json`, caches): `template` only when not plain, so a plain
        spec reads as it did before templates."""
        fields = dataclasses.asdict(self)
        if self.template == "plain":
            del fields["template"]
        return fields


LEGACY_SPEC = InputSpec("plan_text", 256, None)  # a checkpoint without INPUT_FORMAT_FILE was trained so


@dataclass(frozen=True)
class Encoded:
    ids: list[list[int]]
    # graph_first: every agent's fields and every edge reached the model uncut (plan_text: the input was not cut)
    structure_whole: list[bool]
    graph_whole: list[bool]  # graph_first: every agent's id, type, input and roles and every edge did (descriptions
    # may be cut)


def format_input(question: str, plan: str) -> str:
    return TEMPLATE.format(question=question, plan=plan)


def encode(tokenizer, questions: Sequence[str], plans: Sequence[str], spec: InputSpec = InputSpec()) -> list[list[int]]:
    """Token ids of each (question, plan), at most max_length, unpadded.

    Decoder tokenizers (Llama, Qwen) get an EOS appended so that the score, read at the last non-pad token, is read
    at the end of the input; encoder tokenizers (BERT/MiniLM) have no EOS and already end with [SEP].
    """
    return encode_with_report(tokenizer, questions, plans, spec).ids


def encode_with_report(tokenizer, questions: Sequence[str], plans: Sequence[str],
                       spec: InputSpec = InputSpec()) -> Encoded:
    if len(questions) != len(plans):
        raise ValueError(f"{len(questions)} questions but {len(plans)} plans")
    if not questions:
        return Encoded([], [], [])  # fast tokenizers fail on an empty batch
    if spec.template not in ("plain", "chat"):
        raise ValueError(f"unknown reward-model template {spec.template!r}; known: plain, chat")
    if spec.input_format == "plan_text":
        if spec.template == "chat":
            return _encode_plan_text_chat(tokenizer, questions, plans, spec.max_length)
        return _encode_plan_text(tokenizer, questions, plans, spec.max_length)
    if spec.input_format != "graph_first":
        raise ValueError(f"unknown reward-model input format {spec.input_format!r}; known: graph_first, plan_text")
    return _encode_graph_first(tokenizer, questions, plans, spec)


# ---------------------------------------------------------------- graph_first


def render_structure(plan: Plan, description_chars: int | None = None, input_chars: int | None = None) -> str:
    """The plan's graph as compact text: a header with the edges, then one line per agent (descriptions cut to
    description_chars and inputs and roles to input_chars characters, when given)."""
    if plan.is_direct:
        return f"direct answer: {_cut(plan.direct_answer, input_chars)}"
    edges = ", ".join(f"{a}->{b}" for a, b in plan.edges) or "none"
    lines = [f"{len(plan.agents)} agent{'s' * (len(plan.agents) != 1)}; edges {edges}"]
    for agent in plan.agents:
        line = f"[{agent.agent_id}] {agent.agent_name}: {_cut(agent.description, description_chars) or '-'}"
        line += f" | input: {_cut(agent.agent_input, input_chars) or 'the question'}"
        if agent.debate_roles:
            line += f" | roles: {_cut(', '.join(agent.debate_roles), input_chars)}"
        lines.append(line)
    return "\n".join(lines)


def _cut(text: str, chars: int | None) -> str:
    text = " ".join(text.split())
    return text if chars is None or len(text) <= chars else text[:chars] + "..."


def _encode_graph_first(tokenizer, questions, plans, spec: InputSpec) -> Encoded:
    """Structure first (fields cut only if it cannot fit beside QUESTION_FLOOR tokens of question), then as much of
    the question as fits, then the thinking's head and tail in what is left (at most spec.thinking_tokens)."""
    prefix, suffix = _special_tokens(tokenizer, spec.template)
    budget = spec.max_length - len(prefix) - len(suffix)
    parsed = [parse_plan(plan) for plan in plans]
    heads = [f"Question: {q}\n" for q in questions]
    bodies = [f"Plan: {render_structure(p)}\n" if isinstance(p, Plan) else "" for p in parsed]
    tails = [(f"Thinking: {p.thinking}" if p.thinking else "") if isinstance(p, Plan) else f"Plan text: {raw}"
             for p, raw in zip(parsed, plans)]
    head_ids, body_ids, tail_ids = (_tokens(tokenizer, texts) for texts in (heads, bodies, tails))
    ellipsis = _tokens(tokenizer, [ELLIPSIS])[0]
    rows, whole, graph_whole = [], [], []
    for plan, head, body, tail in zip(parsed, head_ids, body_ids, tail_ids):
        room = budget - min(len(head), QUESTION_FLOOR)
        whole.append(len(body) <= room)
        graph_whole.append(True)
        if len(body) > room:
            body, graph_whole[-1] = _fit_structure(tokenizer, plan, room)
        head = head[:budget - len(body)]
        thinking_room = budget - len(head) - len(body)
        if spec.thinking_tokens is not None and isinstance(plan, Plan):
            thinking_room = min(thinking_room, spec.thinking_tokens)
        rows.append(prefix + head + body + _keep_ends(tail, thinking_room, ellipsis) + suffix)
    return Encoded(rows, whole, graph_whole)


def _fit_structure(tokenizer, plan: Plan, room: int) -> tuple[list[int], bool]:
    """(ids, whether the graph is whole) of the structure fitted in `room` tokens: descriptions cut to the longest
    common length that fits; if even empty descriptions do not fit, inputs and roles cut too; ids, agent types and
    edges are never cut unless nothing else is left (then the end is)."""
    def ids(description_chars, input_chars):
        return _tokens(tokenizer, [f"Plan: {render_structure(plan, description_chars, input_chars)}\n"])[0]

    longest_description = max((len(a.description) for a in plan.agents), default=0)
    fitted = _longest_fit(lambda chars: ids(chars, None), longest_description, room)
    if fitted is not None:
        return fitted, True
    longest_input = max([len(plan.direct_answer or "")] + [max(len(a.agent_input), len(", ".join(a.debate_roles)))
                                                            for a in plan.agents])
    fitted = _longest_fit(lambda chars: ids(0, chars), longest_input, room)
    return (fitted if fitted is not None else ids(0, 0)[:room]), False


def _longest_fit(render, longest: int, room: int) -> list[int] | None:
    """render(chars) for the largest chars in 0..longest whose ids fit in room (binary search); None if none."""
    low, high, best = 0, longest, None
    while low <= high:
        chars = (low + high) // 2
        ids = render(chars)
        if len(ids) <= room:
            best, low = ids, chars + 1
        else:
            high = chars - 1
    return best


def _keep_ends(ids: list[int], room: int, ellipsis: list[int]) -> list[int]:
    """ids if they fit in room, else their head and tail around an ellipsis."""
    if len(ids) <= room:
        return ids
    if room <= len(ellipsis):
        return ids[:max(room, 0)]
    kept = room - len(ellipsis)
    return ids[: (kept + 1) // 2] + ellipsis + ids[len(ids) - kept // 2:] if kept // 2 else ids[:kept] + ellipsis


def _tokens(tokenizer, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]


def _special_tokens(tokenizer, template: TemplateKind = "plain") -> tuple[list[int], list[int]]:
    """(ids before, ids after) the text that the tokenizer adds as special tokens (chat: the chat template's turn
    around one user message), plus an EOS at the end for a decoder tokenizer that does not add one (the score is read
    at the last token)."""
    if template == "chat":
        prefix, suffix = _chat_turn(tokenizer)
        eos = tokenizer.eos_token_id
        return prefix, suffix + [eos] if eos is not None and (not suffix or suffix[-1] != eos) else suffix
    core = _tokens(tokenizer, ["orchrm"])[0]
    full = tokenizer(["orchrm"], verbose=False)["input_ids"][0]
    start = next(i for i in range(len(full) - len(core) + 1) if full[i:i + len(core)] == core)
    prefix, suffix = full[:start], full[start + len(core):]
    eos = tokenizer.eos_token_id
    if eos is not None and (not suffix or suffix[-1] != eos):
        suffix = suffix + [eos]
    return prefix, suffix


# ---------------------------------------------------------------- plan_text (the format before graph_first)


def _encode_plan_text(tokenizer, questions, plans, max_length) -> Encoded:
    eos = tokenizer.eos_token_id
    limit = max_length - (eos is not None)
    questions = shorten_questions(tokenizer, questions, int(max_length * QUESTION_SHARE))
    texts = [format_input(q, p) for q, p in zip(questions, plans)]
    ids = tokenizer(texts, truncation=True, max_length=limit)["input_ids"]
    if eos is not None:
        ids = [row if row and row[-1] == eos else row + [eos] for row in ids]
    return Encoded(ids, [len(row) < limit for row in ids], [len(row) < limit for row in ids])


def _encode_plan_text_chat(tokenizer, questions, plans, max_length) -> Encoded:
    """plan_text in the chat template: the text cut at the end to fit between the turn's ids."""
    prefix, suffix = _special_tokens(tokenizer, "chat")
    room = max_length - len(prefix) - len(suffix)
    questions = shorten_questions(tokenizer, questions, int(max_length * QUESTION_SHARE))
    rows = _tokens(tokenizer, [format_input(q, p) for q, p in zip(questions, plans)])
    whole = [len(row) <= room for row in rows]
    return Encoded([prefix + row[:max(room, 0)] + suffix for row in rows], whole, whole)


def _chat_turn(tokenizer) -> tuple[list[int], list[int]]:
    """The ids of the tokenizer's chat template before and after the content of one user message."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("template 'chat' needs a tokenizer with a chat template; this one has none (use 'plain')")
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": CHAT_MARK}], tokenize=False,
                                             add_generation_prompt=False)
    before, _, after = rendered.partition(CHAT_MARK)
    return _tokens(tokenizer, [before])[0], _tokens(tokenizer, [after])[0] if after else []


def shorten_questions(tokenizer, questions: Sequence[str], budget: int) -> list[str]:
    """Each question cut to `budget` tokens (decoded back to text), the others unchanged."""
    ids = _tokens(tokenizer, list(questions))
    return [q if len(row) <= budget else tokenizer.decode(row[:budget]) + " ..." for q, row in zip(questions, ids)]


# ---------------------------------------------------------------- what a checkpoint was trained with


def write_input_spec(model_dir: str, spec: InputSpec) -> None:
    with open(os.path.join(model_dir, INPUT_FORMAT_FILE), "w") as out:
        json.dump(spec.as_dict(), out)


def read_input_spec(model_dir: str) -> InputSpec:
    """How the model in model_dir was trained to read its inputs (LEGACY_SPEC for older checkpoints)."""
    try:
        with open(os.path.join(model_dir, INPUT_FORMAT_FILE)) as source:
            return InputSpec(**json.load(source))
    except FileNotFoundError:
        return LEGACY_SPEC
