"""The mapping from a trace to a run record of the artifact contract, and back: every rule in one module.

Read against the OpenTelemetry GenAI semantic conventions **v1.41.0** (`docs/gen-ai/gen-ai-spans.md` and
`gen-ai-agent-spans.md` of open-telemetry/semantic-conventions at tag v1.41.0; status Development, i.e.
experimental: names may change between releases, and from v1.42.0 on the GenAI conventions live in
open-telemetry/semantic-conventions-genai). What this module reads of them:

- `gen_ai.operation.name`: `invoke_agent` spans are agents, `chat` / `text_completion` / `generate_content` spans
  are inferences, `execute_tool` spans are tools (the values are settings: `TraceSettings.*_operations`); any other
  span (`invoke_workflow`, `create_agent`, `embeddings`, an HTTP span) is transparent: its children count as its
  parent's.
- `gen_ai.agent.name`, `gen_ai.agent.id`; `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.call.arguments`,
  `gen_ai.tool.call.result`;
- `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`; `gen_ai.request.model` (else `gen_ai.response.model`);
- `gen_ai.input.messages`, `gen_ai.output.messages` (structured, or JSON text: `[{"role", "parts": [{"type":
  "text", "content"}]}]`), and the older `gen_ai.prompt` / `gen_ai.completion` text attributes;
- the span status (`code` 2 = ERROR, its `message`), `error.type`, and the resource's attributes (`service.name`).

A trace is first read into `Span`s (OTel in `traces.otlp`; Langfuse and LangSmith in `traces.exports`), then
placed (`place`), whatever its format:

1. The spans form one tree: no span twice, no span whose parent is not in the trace (an orphan), one root, no cycle.
2. The orchestrator and its plan span: a span marked `orchrm.role` = orchestrator / plan, or the agent named
   `orchestrator_agent`, or the span carrying `orchrm.plan`, or the span named `plan_span`; else the plan span is
   the orchestrator's first inference span (the first in the trace when the orchestrator is not known yet) and the
   orchestrator is the nearest agent span above it, else the trace's root.
3. The sub-agent calls: the agent and tool spans the orchestrator reaches without passing another agent or tool
   (or the spans marked `orchrm.role` = subagent, when any is), in start order. A call's tokens are its inference
   spans' usage summed (else its own span's), its input and output its own span's messages (else its first and
   last inference span's), its model its own span's (else its first inference span's).
4. The orchestrator's tokens: the usage of the inference spans it owns (the plan span's among them), else its own.
5. The final answer: `orchrm.final_answer`, else the orchestrator's output, else the last call's output. A run whose
   orchestrator span ended in error keeps its error and needs no final answer.
6. The problem (`orchrm.problem_id`, required), benchmark, question (else the orchestrator's input), reference
   answer, verdict, policy, sample index and plan log-probability from attributes (`TraceSettings` names them).

A trace that cannot be placed raises `Unplaceable` with the reason and the field it concerns.

The OTLP JSON format itself, read (`otlp_spans`, `finish_otel_span`) and written (`runs_to_otlp`: run records as
traces that read back to the same records), is `traces.otlp`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


from orchrm_dagster.contract import POLICY_KINDS
from orchrm_dagster.traces.settings import TraceSettings
from orchrm_dagster.traces.values import count, iso_time, json_text, text_id, text_of

# ---------------------------------------------------------------- the conventions' names (v1.41.0)

OPERATION = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
LEGACY_PROMPT = "gen_ai.prompt"  # before the messages attributes (v1.26-era content attributes)
LEGACY_COMPLETION = "gen_ai.completion"
ERROR_TYPE = "error.type"
SERVICE_NAME = "service.name"
STATUS_ERROR = 2  # OTLP Status.code: 0 unset, 1 ok, 2 error

AGENT, LLM, TOOL, OTHER = "agent", "llm", "tool", "other"
ROLES = ("orchestrator", "plan", "subagent")


class Unplaceable(ValueError):
    """A trace the mapping cannot turn into a run record: why, and the record field (or part of the trace) at fault."""

    def __init__(self, reason: str, field: str | None = None):
        super().__init__(reason)
        self.reason, self.field = reason, field


@dataclass
class Span:
    """One span (an OTel span, a Langfuse observation or trace, a LangSmith run), as the placement reads it."""

    span_id: str
    parent_id: str | None
    name: str
    kind: str  # agent | llm | tool | other
    order: int  # its position as read: ties of start time are broken by it
    start_ns: int = 0
    end_ns: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)  # flat: dotted keys
    resource: dict[str, Any] = field(default_factory=dict)
    input: Any = None
    output: Any = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None
    agent_name: str | None = None
    agent_id: str | None = None
    error: str | None = None  # why it failed, when it ended in error


@dataclass
class Trace:
    """A trace's spans as read, where it was read (`line N` / `item N`) and what was wrong with it while reading
    (it is then quarantined with that reason)."""

    trace_id: str
    spans: list[Span]
    position: int  # line or item where its first span was read
    where: str
    problem: Unplaceable | None = None
    raw: list = field(default_factory=list)  # what was read of it, for the quarantine's raw


# ---------------------------------------------------------------- values

class _Tree:
    def __init__(self, trace: Trace):
        spans = trace.spans
        if not spans:
            raise Unplaceable("the trace holds no span", "spans")
        self.by_id: dict[str, Span] = {}
        for span in spans:
            if span.span_id in self.by_id:
                raise Unplaceable(f"span {span.span_id} appears twice", "spans")
            self.by_id[span.span_id] = span
        for span in spans:
            if span.parent_id is not None and span.parent_id not in self.by_id:
                raise Unplaceable(f"span {span.span_id} ({span.name!r}) names parent {span.parent_id}, which is not "
                                  f"in the trace (an orphan span: its parent was not exported, or is in another file)",
                                  "spans")
        roots = [span for span in spans if span.parent_id is None]
        if len(roots) != 1:
            raise Unplaceable(f"the trace has {len(roots)} root spans ({', '.join(s.span_id for s in roots[:5])}), "
                              "not one" if roots else "the spans' parents form a cycle: the trace has no root",
                              "spans")
        self.root = roots[0]
        self.children: dict[str, list[Span]] = {}
        for span in spans:
            if span.parent_id is not None:
                self.children.setdefault(span.parent_id, []).append(span)
        for kids in self.children.values():
            kids.sort(key=_start_order)
        self.ordered: list[Span] = []  # depth first, children in start order
        self.parent_of: dict[str, Span | None] = {self.root.span_id: None}
        stack = [self.root]
        while stack:
            span = stack.pop()
            self.ordered.append(span)
            kids = self.children.get(span.span_id, [])
            for kid in kids:
                self.parent_of[kid.span_id] = span
            stack.extend(reversed(kids))
        if len(self.ordered) != len(spans):
            unreached = [s.span_id for s in spans if s.span_id not in self.parent_of]
            raise Unplaceable(f"the spans' parents form a cycle ({', '.join(unreached[:5])} never reach the root)",
                              "spans")
        self.position = {span.span_id: i for i, span in enumerate(self.ordered)}

    def ancestors(self, span: Span) -> Iterator[Span]:
        parent = self.parent_of[span.span_id]
        while parent is not None:
            yield parent
            parent = self.parent_of[parent.span_id]

    def subtree(self, span: Span) -> list[Span]:
        """`span` and every span below it, in tree order."""
        found, stack = [], [span]
        while stack:
            current = stack.pop()
            found.append(current)
            stack.extend(self.children.get(current.span_id, []))
        return sorted(found, key=lambda s: self.position[s.span_id])


def _start_order(span: Span) -> tuple[int, int]:
    return span.start_ns, span.order


def place(trace: Trace, settings: TraceSettings, trace_format: str) -> dict:
    """The run record of a trace (a dict the contract then validates), or Unplaceable with the reason."""
    if trace.problem is not None:
        raise trace.problem
    tree = _Tree(trace)
    roles = {span.span_id: span.attributes.get(settings.role_attribute) for span in trace.spans}
    orchestrator = _orchestrator(tree, roles, settings)
    plan_span = _plan_span(tree, roles, settings, orchestrator)
    if orchestrator is None:
        orchestrator = plan_span if plan_span.kind == AGENT else next(
            (s for s in tree.ancestors(plan_span) if s.kind == AGENT), tree.root)
    marked = {sid for sid, role in roles.items() if role == "subagent"}
    calls = _calls(tree, orchestrator, plan_span, marked)
    call_ids = {s.span_id for call in calls for s in tree.subtree(call)}
    lookup = _Lookup([orchestrator, plan_span, tree.root], settings)

    plan = lookup.text(settings.plan_attribute, only=plan_span)
    if plan is None:
        plan = text_of(plan_span.output, "assistant")
    if not plan:
        raise Unplaceable(f"the plan span {plan_span.span_id} ({plan_span.name!r}) has no output text (the plan)",
                          "plan")
    record: dict[str, Any] = {"run_id": lookup.identifier(settings.run_id_attribute) or trace.trace_id}
    problem_id = lookup.identifier(settings.problem_id_attribute)
    if problem_id is None:
        raise Unplaceable(f"no problem: no {settings.problem_id_attribute} attribute on the orchestrator span, the "
                          f"plan span, the root or the resource", "problem_id")
    benchmark = lookup.identifier(settings.benchmark_attribute) or settings.default_benchmark
    if not benchmark:
        raise Unplaceable(f"no benchmark: no {settings.benchmark_attribute} attribute, and no "
                          f"traces.default_benchmark", "benchmark")
    question = lookup.text(settings.question_attribute)
    if question is None:
        question = text_of(orchestrator.input, "user") if orchestrator is not plan_span else None
        question = question if question is not None else text_of(plan_span.input, "user")
    if question is None:
        raise Unplaceable(f"no question: no {settings.question_attribute} attribute, and neither the orchestrator "
                          f"nor the plan span has an input", "question")
    record |= {"problem_id": problem_id, "benchmark": benchmark, "question": question,
               "policy": _policy(lookup, settings, orchestrator, plan_span, tree.root), "plan": plan}

    subagents = [_call(tree, call, index) for index, call in enumerate(calls)]
    error = orchestrator.error
    final = lookup.text(settings.final_answer_attribute)
    if final is None and orchestrator is not plan_span:
        final = text_of(orchestrator.output, "assistant")
    if final is None and error is None and subagents:
        last = max(calls, key=lambda s: (s.end_ns, s.start_ns, tree.position[s.span_id]))
        final = subagents[calls.index(last)].get("output")
    if final is None and error is None:
        raise Unplaceable("no final answer: no final_answer attribute, no output on the orchestrator span, no "
                          "sub-agent call with an output, and the orchestrator did not end in error", "final_answer")
    if final is not None:
        record["final_answer"] = final
    if error is not None:
        record["error"] = error

    reference = lookup.answer(settings.reference_answer_attribute)
    if reference is not None:
        record["reference_answer"] = reference
    verdict = lookup.value(settings.is_correct_attribute)
    if verdict is not None:
        if not isinstance(verdict, bool):
            raise Unplaceable(f"{settings.is_correct_attribute} is {verdict!r}, not a boolean", "is_correct")
        record["is_correct"] = verdict
    for key, name in (("sample_index", settings.sample_index_attribute),):
        value = lookup.value(name)
        if value is not None:
            record[key] = _integer(value, name, key)
    logprob = lookup.value(settings.plan_logprob_attribute)
    if logprob is not None:
        if isinstance(logprob, bool) or not isinstance(logprob, (int, float)):
            raise Unplaceable(f"{settings.plan_logprob_attribute} is {logprob!r}, not a number", "plan_logprob")
        record["plan_logprob"] = float(logprob)
    environment = lookup.identifier(settings.environment_attribute)
    if environment is not None:
        record["environment"] = environment
    if subagents:
        record["subagents"] = subagents
    tokens = _tokens(tree, orchestrator, call_ids, subagents)
    if tokens:
        record["tokens"] = tokens
    created = iso_time(orchestrator.start_ns or tree.root.start_ns)
    if created is not None:
        record["created_at"] = created
    # where the trace came from, so that its label and score can go back to it (`traces.score_export`): the trace,
    # its format, and the orchestrator's span (an OTel span id, a Langfuse observation id, a LangSmith run id)
    record["meta"] = {"trace_id": trace.trace_id, "trace_format": trace_format, "trace_spans": len(trace.spans),
                      "trace_span_id": orchestrator.span_id}
    return record


def _orchestrator(tree: _Tree, roles: dict, settings: TraceSettings) -> Span | None:
    marked = [tree.by_id[sid] for sid, role in roles.items() if role == "orchestrator"]
    if len(marked) > 1:
        raise Unplaceable(f"{len(marked)} spans are marked {settings.role_attribute}=orchestrator", "spans")
    if marked:
        return marked[0]
    if settings.orchestrator_agent is None:
        return None
    named = [s for s in tree.ordered if s.kind == AGENT and s.agent_name == settings.orchestrator_agent]
    if not named:
        raise Unplaceable(f"no agent span named {settings.orchestrator_agent!r} (traces.orchestrator_agent)", "spans")
    return named[0]  # the outermost, first


def _plan_span(tree: _Tree, roles: dict, settings: TraceSettings, orchestrator: Span | None) -> Span:
    within = tree.subtree(orchestrator) if orchestrator is not None else tree.ordered
    marked = [s for s in within if roles[s.span_id] == "plan"]
    carrying = [s for s in within if settings.plan_attribute in s.attributes]
    for chosen, how in ((marked, f"marked {settings.role_attribute}=plan"),
                        (carrying, f"carrying {settings.plan_attribute}")):
        if len(chosen) > 1:
            raise Unplaceable(f"{len(chosen)} spans are {how}: which one is the plan?", "plan")
        if chosen:
            return chosen[0]
    if settings.plan_span is not None:
        named = [s for s in within if s.name == settings.plan_span]
        if not named:
            raise Unplaceable(f"no span named {settings.plan_span!r} (traces.plan_span)", "plan")
        return min(named, key=_start_order)
    owned = _owned(tree, orchestrator) if orchestrator is not None else tree.ordered
    inferences = [s for s in owned if s.kind == LLM]
    if not inferences:
        raise Unplaceable("no plan span: no inference span of the orchestrator (an OTel span whose "
                          f"gen_ai.operation.name is {'/'.join(settings.inference_operations)}, a Langfuse "
                          f"GENERATION, a LangSmith llm run), and no span carrying {settings.plan_attribute}", "plan")
    return min(inferences, key=lambda s: (s.start_ns, tree.position[s.span_id]))


def _owned(tree: _Tree, agent: Span) -> list[Span]:
    """The spans below `agent` that no other agent or tool span stands between."""
    found, stack = [], list(tree.children.get(agent.span_id, []))
    while stack:
        span = stack.pop()
        found.append(span)
        if span.kind not in (AGENT, TOOL):
            stack.extend(tree.children.get(span.span_id, []))
    return sorted(found, key=lambda s: tree.position[s.span_id])


def _calls(tree: _Tree, orchestrator: Span, plan_span: Span, marked: set[str]) -> list[Span]:
    calls, stack = [], list(tree.children.get(orchestrator.span_id, []))
    while stack:
        span = stack.pop()
        if span is plan_span:
            continue
        if (span.span_id in marked) if marked else span.kind in (AGENT, TOOL):
            calls.append(span)
            continue
        stack.extend(tree.children.get(span.span_id, []))
    return sorted(calls, key=lambda s: (s.start_ns, tree.position[s.span_id]))


def _call(tree: _Tree, call: Span, index: int) -> dict:
    inferences = [s for s in tree.subtree(call)[1:] if s.kind == LLM]
    found: dict[str, Any] = {"agent_id": call.agent_id or str(index + 1)}
    if call.agent_name is not None:
        found["agent_name"] = call.agent_name
    text_in = text_of(call.input, "user")
    if text_in is None:
        text_in = next((t for t in (text_of(s.input, "user") for s in inferences) if t is not None), None)
    text_out = text_of(call.output, "assistant")
    if text_out is None:
        text_out = next((t for t in (text_of(s.output, "assistant") for s in reversed(inferences)) if t is not None),
                        None)
    if text_in is not None:
        found["input"] = text_in
    if text_out is not None:
        found["output"] = text_out
    prompt, completion = _usage(inferences) if _any_usage(inferences) else (call.input_tokens, call.output_tokens)
    if prompt is not None:
        found["prompt_tokens"] = prompt
    if completion is not None:
        found["completion_tokens"] = completion
    model = call.model or next((s.model for s in inferences if s.model), None)
    if model is not None:
        found["model"] = model
    return found


def _any_usage(spans: list[Span]) -> bool:
    return any(s.input_tokens is not None or s.output_tokens is not None for s in spans)


def _usage(spans: list[Span]) -> tuple[int | None, int | None]:
    prompts = [s.input_tokens for s in spans if s.input_tokens is not None]
    completions = [s.output_tokens for s in spans if s.output_tokens is not None]
    return (sum(prompts) if prompts else None), (sum(completions) if completions else None)


def _tokens(tree: _Tree, orchestrator: Span, call_ids: set[str], subagents: list[dict]) -> dict:
    own = [s for s in tree.subtree(orchestrator) if s.kind == LLM and s.span_id not in call_ids]
    prompt, completion = _usage(own) if _any_usage(own) else (orchestrator.input_tokens, orchestrator.output_tokens)
    tokens = {"orchestrator_prompt": prompt, "orchestrator_completion": completion}
    prompts = [c["prompt_tokens"] for c in subagents if "prompt_tokens" in c]
    completions = [c["completion_tokens"] for c in subagents if "completion_tokens" in c]
    tokens |= {"subagent_prompt": sum(prompts) if prompts else None,
               "subagent_completion": sum(completions) if completions else None}
    return {key: value for key, value in tokens.items() if value is not None}


def _policy(lookup: _Lookup, settings: TraceSettings, orchestrator: Span, plan_span: Span, root: Span) -> dict:
    name = (lookup.identifier(settings.policy_name_attribute) or orchestrator.agent_name or plan_span.model
            or text_id(root.resource.get(SERVICE_NAME)))
    if not name:
        raise Unplaceable(f"no policy: no {settings.policy_name_attribute} attribute, no agent name on the "
                          f"orchestrator, no model on the plan span and no service.name", "policy.name")
    kind = lookup.value(settings.policy_kind_attribute)
    kind = settings.default_policy_kind if kind is None else kind
    if kind not in POLICY_KINDS:
        raise Unplaceable(f"{settings.policy_kind_attribute} is {kind!r}, not one of {', '.join(POLICY_KINDS)}",
                          "policy.kind")
    policy: dict[str, Any] = {"name": name, "kind": kind}
    step = lookup.value(settings.policy_step_attribute)
    if step is not None:
        policy["step"] = _integer(step, settings.policy_step_attribute, "policy.step")
    return policy


def _integer(value: Any, name: str, field_name: str) -> int:
    number = count(value)
    if number is None:
        raise Unplaceable(f"{name} is {value!r}, not an integer", field_name)
    return number


class _Lookup:
    """An attribute's value: the first of the spans that has it, then the first span's resource."""

    def __init__(self, spans: list[Span], settings: TraceSettings):
        self.spans: list[Span] = []  # each span once, in order
        for span in spans:
            if all(span is not other for other in self.spans):
                self.spans.append(span)
        self.settings = settings

    def value(self, name: str, only: Span | None = None) -> Any:
        for span in [only] if only is not None else self.spans:
            if name in span.attributes and span.attributes[name] is not None:
                return span.attributes[name]
        if only is None:
            for span in self.spans:
                if name in span.resource and span.resource[name] is not None:
                    return span.resource[name]
        return None

    def identifier(self, name: str) -> str | None:
        value = self.value(name)
        if value is None:
            return None
        found = text_id(value)
        if found is None:
            raise Unplaceable(f"{name} is {value!r}, not a non-empty string", name)
        return found

    def text(self, name: str, only: Span | None = None) -> str | None:
        value = self.value(name, only)
        return None if value is None else text_of(value)

    def answer(self, name: str) -> str | None:
        value = self.value(name)
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return json_text(value)
        if isinstance(value, str):
            return value
        raise Unplaceable(f"{name} is {value!r}, not a string or a number", name)

