"""The embedded SmolLM2 GGUF through TransformersBackend (slow: loads and runs a real model on CPU)."""

from __future__ import annotations

import pytest
import xgrammar as xgr

from orchrm_dagster.llm import ChatRequest, SamplingSettings
from orchrm_dagster.llm.grammar_constraint import compile_grammar
from orchrm_dagster.llm.transformers_backend import TransformersBackend
from orchrm_dagster.plans import Plan, PlanError, parse_plan, plan_grammar_ebnf

pytestmark = pytest.mark.slow

QUESTIONS = ("What is 2+2?", "Name one color.", "Write one short sentence about the sea.")

# What the plan grammar cannot rule out (see orchrm_dagster.plans.grammar); parse_plan judges it.
GRAPH_ONLY_ERRORS = {"edge_without_reference", "reference_without_edge", "multiple_sinks"}

ORCHESTRATOR_PROMPT = """You are an orchestrator. Write a plan for the question: <thinking>one line</thinking>, \
then either <answer>...</answer> or agents. Example:
<thinking>
Arithmetic, one agent is enough.
</thinking>
<agent>
<agent_id>1</agent_id>
<agent_name>CoTAgent</agent_name>
<agent_description>Solves the problem step by step.</agent_description>
<required_arguments>
<agent_input>Compute 17 * 3.</agent_input>
</required_arguments>
</agent>
<edge>
</edge>"""


@pytest.fixture(scope="module")
def backend() -> TransformersBackend:
    return TransformersBackend(max_batch_size=4)


def ask(question: str, system: str | None = None, **kwargs) -> ChatRequest:
    messages = ({"role": "system", "content": system},) if system else ()
    return ChatRequest(messages=messages + ({"role": "user", "content": question},), **kwargs)


def test_greedy_batch_is_deterministic_ordered_and_counted(backend):
    sampling = SamplingSettings(max_new_tokens=16)
    requests = [ask(q, sampling=sampling, want_logprobs=True) for q in QUESTIONS]
    first, second = backend.generate(requests), backend.generate(requests)
    assert [c.text for c in first] == [c.text for c in second]
    tokenizer = backend.loaded().tokenizer
    for request, completion in zip(requests, first):
        assert completion.error is None and completion.text
        prompt = tokenizer.apply_chat_template(list(request.messages), tokenize=False, add_generation_prompt=True)
        assert completion.prompt_tokens == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        assert 0 < completion.completion_tokens <= 16
        assert len(completion.token_logprobs) == completion.completion_tokens
        assert all(lp <= 0 for lp in completion.token_logprobs)
        assert completion.finish_reason in ("stop", "length")
    # left padding changes nothing: a request alone gives what it gave in the batch
    [alone] = backend.generate([requests[1]])
    assert alone.text == first[1].text


def test_seeded_sampling_is_reproducible_per_row(backend):
    def sampled(seed):
        return ask(QUESTIONS[2], sampling=SamplingSettings(temperature=1.0, top_p=0.95, max_new_tokens=12, seed=seed))

    first = backend.generate([sampled(7), sampled(7), sampled(8)])
    again = backend.generate([sampled(7)])
    assert first[0].text == first[1].text == again[0].text
    assert all(c.error is None and c.completion_tokens > 0 for c in first)
    assert first[0].token_logprobs is None  # not asked for


def test_stop_strings_and_max_new_tokens(backend):
    [free] = backend.generate([ask(QUESTIONS[0], sampling=SamplingSettings(max_new_tokens=12))])
    stop = free.text.split()[2]
    [stopped] = backend.generate([ask(QUESTIONS[0], sampling=SamplingSettings(max_new_tokens=12, stop=(stop,)))])
    assert stopped.text == free.text[:free.text.index(stop)] and stopped.finish_reason == "stop"
    [short] = backend.generate([ask(QUESTIONS[0], sampling=SamplingSettings(max_new_tokens=3))])
    assert short.completion_tokens == 3 and short.finish_reason == "length"


def test_a_bad_grammar_fails_only_its_own_request(backend):
    sampling = SamplingSettings(max_new_tokens=4)
    bad, good = backend.generate([ask("x", sampling=sampling, grammar="root ::= ("), ask("y", sampling=sampling)])
    assert bad.finish_reason == "error" and "grammar" in bad.error
    assert good.error is None and good.completion_tokens > 0


def test_plan_grammar_outputs_parse(backend):
    grammar = plan_grammar_ebnf()
    requests = [ask("What is 12 + 30?", ORCHESTRATOR_PROMPT, grammar=grammar,
                    sampling=SamplingSettings(temperature=temperature, max_new_tokens=200, seed=seed))
                for temperature, seed in ((0.0, None), (1.0, 1), (1.0, 2))]
    completions = backend.generate(requests)
    compiled = compile_grammar(backend.loaded().tokenizer, grammar)
    for completion in completions:
        assert completion.error is None
        matcher = xgr.GrammarMatcher(compiled)
        assert matcher.accept_string(completion.text), completion.text
        if completion.finish_reason == "length":
            assert completion.completion_tokens == 200
            continue
        assert completion.finish_reason == "stop" and matcher.is_completed()
        plan = parse_plan(completion.text)
        assert isinstance(plan, Plan) or (isinstance(plan, PlanError) and plan.code in GRAPH_ONLY_ERRORS), plan
    assert any(c.finish_reason == "stop" for c in completions)
