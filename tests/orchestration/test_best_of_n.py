"""Best-of-N before rollout: scores of sampled plans, the pick, and a runner that executes one plan per problem."""

import orjson
import pytest

from orchrm_dagster.contract import plan_hash
from orchrm_dagster.orchestration import (Cell, ExecutionSettings, PlanSamplingSettings, PlanScore, PolicySpec,
                                          ScoredSamples, best_of_n, execute_and_land, read_samples,
                                          sample_partition, score_samples)
from orchrm_dagster.orchestration.sampling import PlanSample

from .test_sampling_and_execution import PLAN, ScriptedBackend

KEY = Cell("gsm8k", "p")


def sample(problem: str, index: int, parses: bool = True) -> PlanSample:
    return PlanSample(f"p/{problem}/seed0/{index}", problem, "gsm8k", "q", "1", "math", "p", "base", None, "m",
                      index, index, f"plan {index}", -1.0, parses, None if parses else "bad", None,
                      None if parses else "plan_unparseable", True, 10, 20)


def scored(values: dict[str, float]) -> ScoredSamples:
    return ScoredSamples(3, {run_id: PlanScore(score, 100) for run_id, score in values.items()}, 0)


def test_the_highest_score_among_the_first_n_wins_and_ties_go_to_the_lower_plan_hash():
    samples = [sample("a", i) for i in range(4)] + [sample("b", i) for i in range(3)]
    scores = scored({"p/a/seed0/0": 0.1, "p/a/seed0/1": 0.9, "p/a/seed0/2": 0.9, "p/a/seed0/3": 5.0,
                     "p/b/seed0/0": -1.0, "p/b/seed0/1": -1.0, "p/b/seed0/2": -2.0})
    picks = {s.chosen.problem_id: s for s in best_of_n(samples, scores, 3)}

    def lower_hash(*indexes: int) -> int:
        return min(indexes, key=lambda i: plan_hash(f"plan {i}"))

    # index 3 is outside the first three; 1 and 2 (and 0 and 1 of b) tie: the lower plan hash wins
    assert picks["a"].chosen.run_id == f"p/a/seed0/{lower_hash(1, 2)}/best-of-3"
    assert picks["b"].chosen.run_id == f"p/b/seed0/{lower_hash(0, 1)}/best-of-3"
    meta = picks["a"].meta["selection"]
    assert meta["n"] == 3 and meta["rm_version"] == 3 and meta["chosen"] == f"p/a/seed0/{lower_hash(1, 2)}"
    assert [c["score"] for c in meta["candidates"]] == [0.1, 0.9, 0.9]
    assert meta["verification_tokens"] == 300 and meta["candidate_orchestrator_tokens"] == 90


def test_a_plan_that_does_not_parse_is_never_preferred():
    samples = [sample("a", 0, parses=False), sample("a", 1)]
    [pick] = best_of_n(samples, scored({"p/a/seed0/0": 9.0, "p/a/seed0/1": -9.0}), 2)
    assert pick.chosen.sample_index == 1


@pytest.fixture
def champion_root(storage_root, tiny_backbone):
    from orchrm_dagster.rm import RMTrainConfig, train_new_version

    from ..rm.toy import NO_FLOOR, toy_pairs

    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4, **NO_FLOOR)
    train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(4, 1), config, ["x"])
    return storage_root


def test_scores_are_stored_and_reused_for_the_same_champion(champion_root):
    sample_partition(champion_root, "gsm8k", PolicySpec(name="p"), ScriptedBackend(), PlanSamplingSettings(3, 2))
    samples = read_samples(champion_root, KEY)
    first = score_samples(champion_root, KEY, samples)
    assert first.newly_scored == 6 and first.rm_version == 1 and all(s.tokens > 0 for s in first.scores.values())
    again = score_samples(champion_root, KEY, samples)
    assert again.newly_scored == 0 and again.scores == first.scores


def test_the_runner_in_best_of_n_mode_executes_one_plan_per_problem(champion_root):
    variants = [PLAN, PLAN.replace("CoTAgent", "SCAgent"), PLAN.replace("CoTAgent", "ReflexionAgent")]

    class Varied(ScriptedBackend):
        def generate(self, requests):
            out = super().generate(requests)
            return [o if r.grammar is None else type(o)(variants[i % 3], o.prompt_tokens, o.completion_tokens,
                                                          o.token_logprobs) for i, (r, o) in enumerate(zip(requests, out))]

    sample_partition(champion_root, "gsm8k", PolicySpec(name="p"), Varied(), PlanSamplingSettings(3, 2))
    settings = ExecutionSettings(selection="orchrm_bon", best_of_n=3, concurrent_plans=1)
    report, landed = execute_and_land(champion_root, KEY, ScriptedBackend, settings)
    assert landed.name == "mas-gsm8k_p-best-of-3.jsonl" and report.executed == 2
    records = [orjson.loads(line) for line in champion_root.fs.cat_file(landed.path).splitlines()]
    assert sorted(r["problem_id"] for r in records) == ["gsm8k-test-0000", "gsm8k-test-0001"]
    scores = score_samples(champion_root, KEY, read_samples(champion_root, KEY)).scores
    for record in records:
        selection = record["meta"]["selection"]
        candidates = {c["run_id"]: c["score"] for c in selection["candidates"]}
        assert len(candidates) == 3 and selection["chosen"] == max(candidates, key=candidates.get)
        assert record["run_id"] == selection["chosen"] + "/best-of-3"
        assert all(scores[run_id].score == score for run_id, score in candidates.items())
