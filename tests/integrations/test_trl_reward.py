"""The TRL reward function (`integrations.trl`): what it sends `orchrm serve` (one request per prompt group, chunked;
the question, the plan, the domain; the token), the errors it raises, its async variant, and in-process scoring."""

import asyncio
import pickle
import socket

import httpx
import pytest
from trl.trainer.utils import get_callable_name, is_async_callable

from orchrm_dagster.integrations.trl import (AsyncChampionReward, ChampionReward, ChampionRewardError,
                                             NoChampionError)
from orchrm_dagster.serving import create_app
from tests.serving.conftest import TEST_SETTINGS, running

QUESTION = "How many apples are left if 12 of 40 are eaten?"
OTHER = "What is the capital of France?"
PLANS = ["<agent_name>CoTAgent</agent_name>", "<agent_name>DebateAgent</agent_name> then a check", "a third plan"]


def test_the_completions_of_one_prompt_go_in_one_request_chunked_by_batch_size(fake_service):
    url, fake = fake_service
    reward = ChampionReward(url, batch_size=2, token="")
    prompts = [QUESTION] * 3 + [OTHER] * 3  # TRL's layout: each prompt's group of completions together
    completions = PLANS + ["x", "yy", "zzz"]
    assert reward(prompts=prompts, completions=completions, trainer_state=None) == [len(c) for c in completions]
    sent = sorted((b["question"], tuple(b["plans"])) for b in fake.bodies)
    assert sent == sorted([(QUESTION, tuple(PLANS[:2])), (QUESTION, (PLANS[2],)), (OTHER, ("x", "yy")),
                           (OTHER, ("zzz",))])
    assert all("domain" not in b and "benchmark" not in b for b in fake.bodies)  # no domain: the one champion
    assert reward.last_versions == [7]


def test_conversational_prompts_and_completions_give_the_question_and_the_plan(fake_service):
    url, fake = fake_service
    prompts = [[{"role": "system", "content": "You orchestrate agents."},
                {"role": "user", "content": [{"type": "text", "text": QUESTION}]}]] * 2
    completions = [[{"role": "assistant", "content": PLANS[0]}],
                   [{"role": "assistant", "content": "first"}, {"role": "tool", "content": "ignored"},
                    {"role": "assistant", "content": "second"}]]
    rewards = ChampionReward(url)(prompts=prompts, completions=completions)
    [body] = fake.bodies
    assert body == {"question": QUESTION, "plans": [PLANS[0], "first\nsecond"]}
    assert rewards == [len(PLANS[0]), len("first\nsecond")]


def test_the_domain_and_the_question_come_from_the_settings_or_the_columns(fake_service):
    url, fake = fake_service
    columns = {"domain": ["math", "math", "qa"], "problem": ["bare question", "bare question", "another"]}
    ChampionReward(url, question_column="problem")(prompts=["templated"] * 3, completions=PLANS, **columns)
    assert [(b["question"], b["domain"], len(b["plans"])) for b in fake.bodies] in (
        [("bare question", "math", 2), ("another", "qa", 1)], [("another", "qa", 1), ("bare question", "math", 2)])
    fake.bodies.clear()
    ChampionReward(url, benchmark="gsm8k")(prompts=["q"] * 3, completions=PLANS, **columns)  # fixed: columns unread
    assert fake.bodies == [{"question": "q", "plans": PLANS, "benchmark": "gsm8k"}]
    fake.bodies.clear()
    ChampionReward(url, domain_column=None)(prompts=["q"] * 3, completions=PLANS, benchmark=["hotpotqa"] * 3)
    assert fake.bodies == [{"question": "q", "plans": PLANS, "benchmark": "hotpotqa"}]
    with pytest.raises(ChampionRewardError, match="question_column 'problem' is not a column of the dataset"):
        ChampionReward(url, question_column="problem")(prompts=["q"], completions=["p"])


def test_an_empty_completion_is_not_sent_and_gets_empty_reward(fake_service):
    url, fake = fake_service
    assert ChampionReward(url)(prompts=["q"] * 3, completions=["a", "", "bb"]) == [1.0, None, 2.0]
    assert fake.bodies == [{"question": "q", "plans": ["a", "bb"]}]
    assert ChampionReward(url, empty_reward=-5.0)(prompts=["q"], completions=[""]) == [-5.0]


def test_the_token_is_sent_as_a_bearer_header_and_taken_from_the_environment(fake_service, monkeypatch):
    url, fake = fake_service
    ChampionReward(url, token="s3cret")(prompts=["q"], completions=["p"])
    monkeypatch.setenv("ORCHRM_SERVE_TOKEN", "from-env")
    ChampionReward(url)(prompts=["q"], completions=["p"])
    monkeypatch.delenv("ORCHRM_SERVE_TOKEN")
    ChampionReward(url)(prompts=["q"], completions=["p"])
    assert fake.authorizations == ["Bearer s3cret", "Bearer from-env", None]
    assert "s3cret" not in repr(ChampionReward(url, token="s3cret"))


def test_the_service_door_refuses_a_missing_or_wrong_token_with_its_reason(math_root):
    with running(create_app(math_root, TEST_SETTINGS, token="right-token")) as url:
        for token, says in ((None, "this service needs a bearer token"), ("wrong", "wrong bearer token")):
            with pytest.raises(ChampionRewardError, match=f"refused to score \\(401\\): {says}") as refused:
                ChampionReward(url, token=token or "")(prompts=[QUESTION], completions=PLANS[:1])
            assert refused.value.status == 401 and not isinstance(refused.value, NoChampionError)
        assert len(ChampionReward(url, token="right-token")(prompts=[QUESTION], completions=PLANS[:1])) == 1


def test_a_service_error_an_unreachable_service_and_a_timeout_raise_saying_what(fake_service):
    url, fake = fake_service
    fake.status, fake.error = 422, "plans.0: String should have at most 2000 characters"
    with pytest.raises(ChampionRewardError, match="refused to score \\(422\\): plans.0: String should have"):
        ChampionReward(url)(prompts=["q"], completions=["p"])
    fake.status, fake.error = 503, "no champion reward model for the qa domain: none trained yet"
    with pytest.raises(NoChampionError, match="no champion reward model for the qa domain"):
        ChampionReward(url)(prompts=["q"], completions=["p"])
    fake.status, fake.delay = 200, 2.0
    with pytest.raises(ChampionRewardError, match="did not answer within 0.3 s"):
        ChampionReward(url, timeout=0.3)(prompts=["q"], completions=["p"])
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(ChampionRewardError, match="cannot reach orchrm serve at .* after 2 tries: ConnectError"):
        ChampionReward(closed, retries=1)(prompts=["q"], completions=["p"])
    with pytest.raises(ValueError, match="either url .* or root"):
        ChampionReward()
    with pytest.raises(ValueError, match="domain or benchmark, not both"):
        ChampionReward(url, domain="math", benchmark="gsm8k")


def test_the_async_variant_is_awaited_by_trl_and_both_pickle_under_their_name(fake_service):
    url, fake = fake_service
    sync, concurrent = ChampionReward(url, batch_size=2), AsyncChampionReward(url, batch_size=2, name="rm_math")
    assert not is_async_callable(sync) and is_async_callable(concurrent)
    assert get_callable_name(sync) == "orchrm_champion" and get_callable_name(concurrent) == "rm_math"
    prompts, completions = [QUESTION] * 3 + [OTHER], PLANS + ["x"]
    assert asyncio.run(concurrent(prompts=prompts, completions=completions)) == sync(prompts=prompts,
                                                                                     completions=completions)
    revived = pickle.loads(pickle.dumps(concurrent))  # AsyncGRPOTrainer's rollout process gets a pickled copy
    assert get_callable_name(revived) == "rm_math"
    assert asyncio.run(revived(prompts=prompts, completions=completions)) == [len(c) for c in completions]
    assert pickle.loads(pickle.dumps(sync)).url == url


def test_in_process_and_over_http_the_rewards_are_the_services_scores(math_root, math_service):
    prompts, completions = [QUESTION] * 3, PLANS
    served = httpx.post(f"{math_service}/v1/score", json={"question": QUESTION, "plans": PLANS, "domain": "math"})
    expected = served.json()["scores"]
    logged = []
    over_http = ChampionReward(math_service, domain="math")(prompts=prompts, completions=completions,
                                                            log_metric=lambda name, value: logged.append((name, value)))
    assert over_http == pytest.approx(expected, abs=1e-6) and logged == [("orchrm_champion/rm_version", 1.0)]
    in_process = ChampionReward(root=math_root.url, domain="math", scoring=TEST_SETTINGS.scoring)
    assert in_process(prompts=prompts, completions=completions) == pytest.approx(expected, abs=1e-5)
    assert asyncio.run(AsyncChampionReward(root=math_root, benchmark="gsm8k")(prompts=prompts, completions=completions)
                       ) == pytest.approx(expected, abs=1e-5)
    # a domain without a champion: the reason, in process as from the service
    with pytest.raises(NoChampionError, match="no champion reward model for the qa domain"):
        ChampionReward(root=math_root)(prompts=prompts, completions=completions, domain=["qa"] * 3)
    with pytest.raises(NoChampionError, match="refused to score \\(503\\): no champion reward model for the qa domain"):
        ChampionReward(math_service, domain="qa")(prompts=prompts, completions=completions)
