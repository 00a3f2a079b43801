"""The embedded SmolLM2 GGUF through TransformersBackend (slow: loads and runs a real model on CPU)."""

from __future__ import annotations

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string as is_grammar_accept_string

from orchrm_dagster.llm import ChatRequest, SamplingSettings
from orchrm_dagster.llm.grammar_constraint import compile_grammar
from orchrm_dagster.llm.transformers_decoding import TransformersBackend
from orchrm_dagster.plans import AgentSpec, Plan, parse_plan, plan_grammar_ebnf, render_plan
from orchrm_dagster.plans.grammar import TextBounds

pytestmark = pytest.mark.slow

QUESTIONS = ("What is 2+2?", "Name one color.", "Write one short sentence about the sea.")

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


def test_plan_grammar_outputs_parse_within_the_token_budget(backend):
    grammar = plan_grammar_ebnf(max_agents=1, bounds=TextBounds.fit(200, max_agents=1))
    requests = [ask("What is 12 + 30?", ORCHESTRATOR_PROMPT, grammar=grammar,
                    sampling=SamplingSettings(temperature=temperature, max_new_tokens=200, seed=seed))
                for temperature, seed in ((0.0, None), (1.0, 1), (1.0, 2))]
    completions = backend.generate(requests)
    compiled = compile_grammar(backend.loaded().tokenizer, grammar)
    for completion in completions:
        assert completion.error is None and completion.finish_reason == "stop", completion
        matcher = xgr.GrammarMatcher(compiled)
        assert matcher.accept_string(completion.text) and matcher.is_completed(), completion.text
        assert isinstance(parse_plan(completion.text), Plan), completion.text


@pytest.mark.parametrize("max_new_tokens, max_agents", [(640, 3), (1024, 4), (200, 1)])
def test_the_longest_ascii_plan_the_fitted_grammar_admits_fits_the_budget(backend, max_new_tokens, max_agents):
    bounds = TextBounds.fit(max_new_tokens, max_agents)
    digits = "1234567890" * 100  # one token per digit with this tokenizer: the costliest ASCII text

    def longest_input(k):  # agent k references every earlier agent, each text run at its bound
        run = digits[:bounds.agent_input // k]
        return run + "".join("${%d}%s" % (i, run) for i in range(1, k))

    agents = tuple(AgentSpec(str(k), "ReflexionAgent", digits[:bounds.text], longest_input(k), (digits[:bounds.roles],))
                   for k in range(1, max_agents + 1))
    edges = tuple((str(i), str(k)) for k in range(2, max_agents + 1) for i in range(1, k))
    text = render_plan(Plan(thinking=digits[:bounds.thinking - 2], agents=agents, edges=edges))  # 2: its newlines
    assert is_grammar_accept_string(plan_grammar_ebnf(max_agents=max_agents, bounds=bounds), text)
    assert not is_grammar_accept_string(plan_grammar_ebnf(max_agents=max_agents, bounds=bounds),
                                        text.replace("<agent_description>", "<agent_description>1", 1))
    tokens = len(backend.loaded().tokenizer(text, add_special_tokens=False)["input_ids"])
    assert tokens <= max_new_tokens, (tokens, bounds)
