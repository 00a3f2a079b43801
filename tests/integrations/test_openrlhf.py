"""OpenRLHF's remote reward-model protocol on `orchrm serve` (`POST /v1/openrlhf/get_reward`), posted the way
OpenRLHF's client posts it (aiohttp, a JSON body {"query", "prompts", "labels"}, no other header; v0.11's
`SingleTurnAgentExecutor._fetch_rewards_via_http`): the champion's scores, in request order."""

import asyncio

import aiohttp
import httpx
import pytest

from orchrm_dagster.serving import create_app
from orchrm_dagster.serving.openrlhf import PATH, response_text
from tests.serving.conftest import TEST_SETTINGS, running

Q1 = "How many apples are left if 12 of 40 are eaten?"
Q2 = "What is 12 * 7?"
TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"  # what OpenRLHF's chat template makes of it


def post_like_openrlhf(url: str, payload: dict, headers: dict | None = None) -> tuple[int, dict]:
    async def post():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session:
            async with session.post(url, json=payload, headers=headers) as response:
                return response.status, await response.json()

    return asyncio.run(post())


def samples(questions_and_responses):
    prompts = [TEMPLATE.format(q) for q, _ in questions_and_responses]
    return {"query": [p + r + "<|im_end|>" for p, (_, r) in zip(prompts, questions_and_responses)],
            "prompts": prompts, "labels": ["40 - 12 = 28" for _ in questions_and_responses]}


def v1_scores(url: str, question: str, plans: list[str], **extra) -> list[float]:
    answer = httpx.post(f"{url}/v1/score", json={"question": question, "plans": plans, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()["scores"]


def test_openrlhf_gets_the_champions_scores_in_request_order(math_service):
    # two prompts' samples interleaved, as a batch of an older OpenRLHF (v0.9 posts whole rollout batches)
    asked = [(Q1, "<agent_name>CoTAgent</agent_name>"), (Q2, "a plan"), (Q1, "another plan for it"),
             (Q1, "<agent_name>DebateAgent</agent_name>"), (Q2, "")]
    payload = samples(asked)
    payload["query"][4] = payload["prompts"][4]  # no response at all: an empty plan, scored
    status, body = post_like_openrlhf(f"{math_service}{PATH}", payload)
    assert status == 200, body
    expected = [v1_scores(math_service, TEMPLATE.format(q), [r + "<|im_end|>"])[0] for q, r in asked[:4]]
    assert body["rewards"][:4] == pytest.approx(expected, abs=1e-5)
    assert body["scores"] == body["rewards"] and len(body["rewards"]) == 5
    assert body["rm_versions"] == [1] and body["domain"] is None
    # one sample per request, as OpenRLHF v0.10+ posts; the domain from the URL
    status, one = post_like_openrlhf(f"{math_service}{PATH}?domain=math", samples(asked[:1]))
    assert status == 200 and one["rewards"] == pytest.approx(expected[:1], abs=1e-5) and one["domain"] == "math"


def test_the_question_may_be_the_label_and_the_domain_a_benchmark(math_service):
    asked = [(Q1, "plan one"), (Q1, "plan two")]
    payload = {**samples(asked), "labels": [Q1, Q1]}
    status, body = post_like_openrlhf(f"{math_service}{PATH}?question=label&benchmark=gsm8k", payload)
    assert status == 200, body
    assert body["rewards"] == pytest.approx(v1_scores(math_service, Q1, ["plan one<|im_end|>", "plan two<|im_end|>"],
                                                      domain="math"), abs=1e-5)
    assert body["domain"] == "math"


@pytest.mark.parametrize("suffix, payload, status, says", [
    ("?domain=qa", samples([(Q1, "p")]), 503, "no champion reward model for the qa domain"),
    ("?domain=chess", samples([(Q1, "p")]), 422, "unknown domain 'chess'"),
    ("", {"query": ["a", "b"], "prompts": ["a"]}, 422, "2 queries but 1 prompts"),
    ("", {"prompts": ["a"]}, 422, "query: Field required"),
    ("?question=label", {**samples([(Q1, "p")]), "labels": [None]}, 422, "every label must be a non-empty string"),
    ("?question=answer", samples([(Q1, "p")]), 422, "question"),
])
def test_a_refusal_says_why(math_service, suffix, payload, status, says):
    answer = httpx.post(f"{math_service}{PATH}{suffix}", json=payload)
    assert answer.status_code == status and says in answer.json()["error"], answer.text


def test_the_endpoint_is_behind_the_services_token(math_root):
    with running(create_app(math_root, TEST_SETTINGS, token="right-token")) as url:
        status, body = post_like_openrlhf(f"{url}{PATH}", samples([(Q1, "p")]))
        assert status == 401 and "bearer token" in body["error"]
        status, body = post_like_openrlhf(f"{url}{PATH}", samples([(Q1, "p")]),
                                          headers={"Authorization": "Bearer right-token"})
        assert status == 200 and len(body["rewards"]) == 1


def test_the_response_is_what_follows_the_prompt():
    assert response_text("PROMPT and the response", "PROMPT") == " and the response"
    assert response_text("<s>PROMPT response", "PROMPT") == " response"  # a BOS the prompt text lacks
    assert response_text("truncated prompt response", "PROMPT") == "truncated prompt response"
    assert response_text("PROMPT", "PROMPT") == ""
