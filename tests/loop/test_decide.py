"""The loop's rules, written once in `decide`: given a state, what happens next."""

import dataclasses

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from orchrm_dagster.loop import LEARNING, ROUNDS, Batch, LoopSettings, LoopState, Round, StepRuns, decide

# the count rule (the stale rule: test_staleness.py)
SETTINGS = LoopSettings(rounds=2, retrain_min_new_pairs=50, retrain_on="new_pairs")
NO_ROUNDS = dataclasses.replace(SETTINGS, rounds=0)  # the rounds lane asks nothing: the learning lane alone
CURRENT = LoopState(ingested_batches=2, inputs="i1", pairs_inputs="i1", pairs=200, new_pairs=0, champion=1)


def kinds(decision, lane=LEARNING):
    """The kinds of the steps asked in one lane (the learning lane unless told)."""
    return [step.kind for step in decision.steps if step.kind in lane]


def round_kinds(decision):
    return kinds(decision, ROUNDS)


def a_round(number, promoted=True, tokens=1000):
    return Round(number, f"grpo-r{number:04d}", promoted, tokens, "gsm8k", "smollm2-base", ("p1", "p2"))


def test_landed_files_are_ingested_first():
    state = dataclasses.replace(CURRENT, batches=(Batch("a.jsonl", "a.jsonl", "10:1", False),
                                                  Batch("b.jsonl", "b.jsonl", "20:1", True)))
    decision = decide(state, NO_ROUNDS)
    assert kinds(decision) == ["ingest"] and decision.steps[0].batch.batch_id == "a.jsonl"
    assert decision.steps[0].key == "ingest:a.jsonl:10:1" and decision.steps[0].run_key == "ingest:a.jsonl:10:1#0"


def test_a_failed_batch_holds_nothing_and_is_reported_with_its_cause():
    failed = Batch("bad.jsonl", "bad.jsonl", "5:1", False)
    runs = StepRuns(failures={"ingest:bad.jsonl:5:1": (2, "OSError: disk gone")})
    state = dataclasses.replace(CURRENT, batches=(failed,), inputs="i2", runs=runs)
    decision = decide(state, NO_ROUNDS)
    assert kinds(decision) == ["pairs"]  # the other batches' pairs are rebuilt
    assert decision.failed == (("ingest:bad.jsonl:5:1", "OSError: disk gone"),)


def test_a_failed_step_is_asked_for_again_until_its_attempts_are_spent():
    runs = StepRuns(failures={"pairs:i2": (1, "boom")})
    retry = decide(dataclasses.replace(CURRENT, inputs="i2", runs=runs), NO_ROUNDS)
    assert kinds(retry) == ["pairs"] and retry.steps[0].attempt == 1 and retry.steps[0].run_key == "pairs:i2#1"
    spent = decide(dataclasses.replace(CURRENT, inputs="i2", runs=StepRuns(failures={"pairs:i2": (2, "boom")})),
                   NO_ROUNDS)
    assert spent.steps == () and spent.failed == (("pairs:i2", "boom"),)


def test_a_step_in_flight_is_waited_for_not_asked_twice():
    decision = decide(dataclasses.replace(CURRENT, inputs="i2", runs=StepRuns(in_flight=frozenset({"pairs:i2"}))),
                      NO_ROUNDS)
    assert decision.steps == () and decision.waiting == ("pairs:i2 (in flight)",)


@pytest.mark.parametrize("new_pairs, champion, retrains", [(None, None, True), (49, 1, False), (50, 1, True)])
def test_the_reward_model_retrains_once_enough_new_pairs_arrived(new_pairs, champion, retrains):
    state = dataclasses.replace(CURRENT, new_pairs=new_pairs, champion=champion)
    decision = decide(state, NO_ROUNDS)
    assert ("reward_model" in kinds(decision)) == retrains
    if retrains:
        assert decision.steps[0].reward_model == NO_ROUNDS.reward_model


def test_runs_the_champion_has_not_scored_are_scored():
    decision = decide(dataclasses.replace(CURRENT, batches_to_score=("b.jsonl",)), NO_ROUNDS)
    assert kinds(decision) == ["scores"] and decision.steps[0].key == "scores:v1:i1"


def test_the_first_round_starts_once_the_learning_part_is_current():
    decision = decide(CURRENT, SETTINGS)
    assert decision.steps == decision.steps[:1] and round_kinds(decision) == ["round"]
    assert decision.steps[0].round == 1 and decision.steps[0].grpo == SETTINGS.round


def test_no_round_without_a_champion():
    none_trained = dict.fromkeys(("choice", "math", "qa"), "no champion reward model yet (none trained)")
    decision = decide(dataclasses.replace(CURRENT, pairs=0, champion=None, new_pairs=None, no_champion=none_trained),
                      SETTINGS)
    assert decision.steps == () and decision.blocked.startswith("no champion reward model yet")


def test_the_loop_is_blocked_while_the_rounds_domain_has_no_champion_and_says_why():
    why = ("no champion reward model for the math domain: v1's validation accuracy 0.440 on 96 pairs does not beat "
           "chance (one-sided binomial test against 0.5: p = 0.9 > 0.05)")
    trained_nothing = dataclasses.replace(CURRENT, champion=None, no_champion={"math": why, "qa": "..."})
    decision = decide(trained_nothing, SETTINGS)  # the rounds run on gsm8k: math
    assert decision.steps == () and decision.blocked == why
    # another domain's champion does not reward a math round
    qa_only = dataclasses.replace(CURRENT, champion=2, no_champion={"math": why})
    assert decide(qa_only, SETTINGS).blocked == why and decide(qa_only, SETTINGS).steps == ()
    # a domain the rounds do not train on may lack one
    assert round_kinds(decide(dataclasses.replace(CURRENT, no_champion={"qa": "..."}), SETTINGS)) == ["round"]


def test_a_promoted_checkpoint_rolls_out_with_the_base_policy_before_the_next_round():
    decision = decide(dataclasses.replace(CURRENT, rounds=(a_round(1),)), SETTINGS)
    assert round_kinds(decision) == ["rollout", "rollout"]
    assert [s.policy for s in decision.steps] == ["grpo-r0001", "smollm2-base"]
    step = decision.steps[0]
    assert step.sampling.problem_ids == ("p1", "p2") and step.sampling.n_samples == SETTINGS.rollout_samples
    assert step.execution == SETTINGS.rollout_execution and step.benchmark == "gsm8k"
    done = StepRuns(succeeded=frozenset({"rollout:1:grpo-r0001", "rollout:1:smollm2-base"}))
    assert round_kinds(decide(dataclasses.replace(CURRENT, rounds=(a_round(1),), runs=done), SETTINGS)) == ["round"]


def test_a_rejected_checkpoint_never_rolls_out_and_the_next_round_starts():
    decision = decide(dataclasses.replace(CURRENT, rounds=(a_round(1, promoted=False),)), SETTINGS)
    assert round_kinds(decision) == ["round"] and decision.steps[0].round == 2


def test_the_loop_stops_at_its_rounds_and_at_its_budget():
    rounds = (a_round(1, promoted=False), a_round(2, promoted=False))
    assert decide(dataclasses.replace(CURRENT, rounds=rounds), SETTINGS).stopped == "the loop has run its 2 rounds"
    budget = dataclasses.replace(SETTINGS, rounds=5, token_budget=1500)
    assert "token budget" in decide(dataclasses.replace(CURRENT, rounds=rounds), budget).stopped


batches = st.lists(st.builds(Batch, st.text("abc", min_size=1, max_size=3).map(lambda s: s + ".jsonl"),
                             st.just("x.jsonl"), st.text("0123", min_size=1, max_size=3), st.booleans()),
                   max_size=4, unique_by=lambda b: b.batch_id)


@hsettings(max_examples=200, deadline=None)
@given(batches=batches, pairs=st.integers(0, 300), new_pairs=st.one_of(st.none(), st.integers(0, 300)),
       champion=st.one_of(st.none(), st.integers(1, 3)), n_rounds=st.integers(0, 3), promoted=st.booleans(),
       stale_pairs=st.booleans(), in_flight=st.booleans())
def test_each_lane_asks_its_steps_in_the_chains_order_and_never_a_step_in_flight(batches, pairs, new_pairs, champion, n_rounds,
                                                                     promoted, stale_pairs, in_flight):
    state = LoopState(batches=tuple(batches), ingested_batches=1, inputs="now",
                      pairs_inputs="before" if stale_pairs else "now", pairs=pairs, new_pairs=new_pairs,
                      champion=champion, rounds=tuple(a_round(r, promoted) for r in range(1, n_rounds + 1)),
                      no_champion={} if champion is not None else {"math": "none trained"})  # as read_state has it
    first = decide(state, SETTINGS)
    if in_flight and first.steps:
        busy = dataclasses.replace(state, runs=StepRuns(in_flight=frozenset(s.key for s in first.steps)))
        again = decide(busy, SETTINGS)
        assert not {s.key for s in again.steps} & {s.key for s in first.steps}
    order = ["ingest", "scores", "pairs", "reward_model"]
    learned = kinds(first)
    assert learned == sorted(learned, key=order.index)  # the chain's order, each kind once but ingests
    assert len(learned) == len(set(learned)) + max(0, learned.count("ingest") - 1)
    assert len(set(round_kinds(first))) <= 1  # one phase of the rounds lane
    assert [s.kind for s in first.steps] == round_kinds(first) + learned  # the rounds lane's steps first
    assert not (round_kinds(first) and first.stopped)
    if any(not b.ingested for b in batches):
        assert "ingest" in learned
    if "scores" in learned:
        assert champion is not None
    if round_kinds(first):
        assert champion is not None


def test_new_batches_are_scored_by_the_champion_beside_a_due_retraining_not_after_it():
    """Under a steady stream a retraining is nearly always due: the champion's scores of new batches are asked
    beside it (first, for `orchrm loop`), and neither waits for the other."""
    state = dataclasses.replace(CURRENT, new_pairs=80, batches_to_score=("b.jsonl",))
    assert [s.kind for s in decide(state, NO_ROUNDS).steps] == ["scores", "reward_model"]
    runs = StepRuns(in_flight=frozenset({"reward_model:i0"}))  # nor does a retraining in flight hold them back
    assert [s.kind for s in decide(dataclasses.replace(state, runs=runs), NO_ROUNDS).steps] == ["scores"]
    scored = dataclasses.replace(state, batches_to_score=())
    assert [s.kind for s in decide(scored, NO_ROUNDS).steps] == ["reward_model"]


def test_a_newer_pairs_retraining_or_scoring_waits_for_the_one_in_flight():
    """A batch ingested while a retraining waits in the queue changes its inputs, so its key: the newer one is not
    queued beside it (a soak queued 6 retrainings and 9 pairs builds at once, 2026-12-03), but asked once it ended."""
    runs = StepRuns(in_flight=frozenset({"reward_model:i0"}))
    state = dataclasses.replace(CURRENT, new_pairs=80, batches_to_score=(), runs=runs)
    decision = decide(state, NO_ROUNDS)
    assert decision.steps == () and decision.waiting == ("reward_model:i0 (in flight; reward_model:i1 after it)",)
    assert [s.key for s in decide(dataclasses.replace(state, runs=StepRuns()), NO_ROUNDS).steps] == ["reward_model:i1"]


def test_batch_states_say_what_became_of_each_landed_file():
    from orchrm_dagster.loop import batch_states

    batches = (Batch("ok.jsonl", "ok.jsonl", "1:1", True), Batch("bad.jsonl", "bad.jsonl", "2:2", False),
               Batch("busy.jsonl", "busy.jsonl", "3:3", False), Batch("new.jsonl", "new.jsonl", "4:4", False))
    runs = StepRuns(in_flight=frozenset({"ingest:busy.jsonl:3:3"}),
                    failures={"ingest:bad.jsonl:2:2": (2, "OSError: gone")})
    states = {s.batch_id: s for s in batch_states(LoopState(batches=batches, runs=runs))}
    assert [(s.state, s.cause, s.failed) for s in states.values()] == [
        ("ingested", "", False), ("failed (2 runs)", "OSError: gone", True), ("ingesting", "", False),
        ("landed", "", False)]


def test_a_from_scratch_loop_retrains_the_reward_model_on_correct_over_incorrect_pairs_once():
    scratch = dataclasses.replace(SETTINGS, round=dataclasses.replace(SETTINGS.round, start="scratch"))
    trained_on_every_pair = dataclasses.replace(CURRENT, trained_on=())
    decision = decide(trained_on_every_pair, scratch)
    step = next(s for s in decision.steps if s.kind == "reward_model")
    assert kinds(decision) == ["reward_model"] and "correct_over_incorrect" in step.why
    assert step.reward_model.pair_sources == ("correct_over_incorrect",)
    assert step.key == "reward_model:i1:correct_over_incorrect"
    retrained = dataclasses.replace(CURRENT, trained_on=("correct_over_incorrect",))
    assert kinds(decide(retrained, scratch)) == [] and round_kinds(decide(retrained, scratch)) == ["round"]
    assert kinds(decide(trained_on_every_pair, SETTINGS)) == []  # continue: every pair, as trained
    assert kinds(decide(retrained, SETTINGS)) == ["reward_model"]  # and back again when the recipe changes back
