"""The two lanes under a stream of arriving runs: `decide` against a small model of the world it asks (batches that
land, steps that take ticks to run, rollouts that land batches of their own). A due round is asked within a bounded
number of ticks whatever keeps arriving, and never before the last promoted round's rollouts are in the pairs (and
trained on, where they made a retraining due)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hypothesis import given, settings as hsettings, strategies as st

from orchrm_dagster.loop import Batch, LoopSettings, LoopState, Round, StepRuns, decide

PAIRS_A_BATCH = 10
SETTINGS = LoopSettings(rounds=3, retrain_min_new_pairs=30, retrain_defer_s=600, retrain_on="new_pairs")
TICK_S = 60.0
DURATION = {"ingest": 1, "pairs": 1, "scores": 1, "reward_model": 3, "rollout": 2, "round": 5}
BASE = "smollm2-base"


@dataclass
class World:
    """What the loop's state is read from, advanced one tick at a time."""

    now: float = 0.0
    generation: int = 0
    batches: dict[str, tuple[str, bool]] = field(default_factory=dict)  # id -> (fingerprint, ingested)
    runs_generation: dict[str, str] = field(default_factory=dict)  # ingested batch -> its runs' generation
    pairs: dict[str, str] | None = None  # batch -> generation the pairs were built from
    trained: dict[str, str] | None = None  # the latest reward model's
    version: int = 0
    trained_at: float | None = None
    scored: dict[str, str] = field(default_factory=dict)  # batch -> generation the champion scored
    scored_by: dict[str, int] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    rollouts: dict[int, dict[str, tuple[str, str]]] = field(default_factory=dict)  # round -> policy -> batch
    running: dict[str, tuple[object, int, dict]] = field(default_factory=dict)  # key -> (step, ends at tick, seen)
    succeeded: set[str] = field(default_factory=set)
    landings: int = 0
    durations: dict[str, int] = field(default_factory=lambda: dict(DURATION))  # ticks each kind of step runs

    def inputs(self) -> str:
        return str(sorted(self.runs_generation.items()))

    def land(self, batch_id: str | None = None) -> str:
        self.landings += 1
        batch_id = batch_id or f"b{self.landings}"
        self.batches[batch_id] = (f"f{self.landings}", False)
        self.runs_generation.pop(batch_id, None)
        return batch_id

    def state(self) -> LoopState:
        pairs_in = self.pairs or {}
        new = None if self.trained is None else PAIRS_A_BATCH * sum(
            1 for b, g in pairs_in.items() if self.trained.get(b) != g)
        rounds = tuple(dataclasses.replace(r, rollout_batches={
            p: (b, self.runs_generation.get(b, "")) for p, (b, _) in self.rollouts.get(r.round, {}).items()})
            for r in self.rounds)
        champion = self.version or None
        return LoopState(
            batches=tuple(Batch(b, b, f, ingested) for b, (f, ingested) in self.batches.items()),
            now=self.now, ingested_batches=len(self.runs_generation), inputs=self.inputs(),
            pairs_inputs=None if self.pairs is None else str(sorted(self.pairs.items())),
            pairs=PAIRS_A_BATCH * len(pairs_in), new_pairs=new, trained_on=() if self.trained is not None else None,
            champion=champion, no_champion={} if champion else {"math": "none trained"},
            batches_to_score=tuple(b for b, g in self.runs_generation.items()
                                   if champion and (self.scored.get(b) != g or self.scored_by.get(b) != champion)),
            pairs_batches=self.pairs, trained_batches=self.trained, trained_at=self.trained_at,
            rounds=rounds, runs=StepRuns(frozenset(self.running), frozenset(self.succeeded)))

    def start(self, step, tick: int, seen: LoopState) -> None:
        snapshot = {"generations": dict(self.runs_generation), "pairs": self.pairs, "champion": self.version}
        self.running[step.key] = (step, tick + self.durations[step.kind], snapshot)

    def finish(self, tick: int, promote) -> list[str]:
        done = [key for key, (_, ends, _) in self.running.items() if ends <= tick]
        for key in done:
            step, _, seen = self.running.pop(key)
            self.succeeded.add(key)
            self._apply(step, seen, promote)
        return done

    def _apply(self, step, seen, promote) -> None:
        if step.kind == "ingest":
            fingerprint, _ = self.batches[step.batch.batch_id]
            if fingerprint == step.batch.fingerprint:
                self.generation += 1
                self.batches[step.batch.batch_id] = (fingerprint, True)
                self.runs_generation[step.batch.batch_id] = f"g{self.generation}"
        elif step.kind == "pairs":
            self.pairs = seen["generations"]
        elif step.kind == "scores":
            for b, g in seen["generations"].items():
                self.scored[b], self.scored_by[b] = g, seen["champion"]
        elif step.kind == "reward_model":
            self.trained, self.version, self.trained_at = seen["pairs"] or {}, self.version + 1, self.now
        elif step.kind == "rollout":
            batch_id = self.land(f"mas-{step.policy}")  # the base policy's lands under the same name each round
            self.rollouts.setdefault(step.round, {})[step.policy] = (batch_id, "")
        elif step.kind == "round":
            self.rounds.append(Round(step.round, f"grpo-r{step.round:04d}", promote(step.round), 1000, "gsm8k",
                                     BASE, ("p1",), self.version))


def barrier_holds(world: World, state: LoopState, number: int) -> bool:
    """Round `number`'s start: the last promoted round's rollouts landed, and each of their batches is ingested,
    scored and in the pairs as ingested now, and trained on unless no retraining is due."""
    promoted = [r for r in world.rounds if r.promoted]
    if not promoted:
        return True
    last = promoted[-1]
    landed = world.rollouts.get(last.round, {})
    if set(landed) != {last.policy, BASE}:
        return False
    for batch_id, _ in landed.values():
        generation = world.runs_generation.get(batch_id)
        if generation is None or (world.pairs or {}).get(batch_id) != generation:
            return False
        if batch_id in state.batches_to_score:
            return False
        retraining_due = state.new_pairs is not None and state.new_pairs >= SETTINGS.retrain_min_new_pairs
        if retraining_due and (world.trained or {}).get(batch_id) != generation:
            return False
    return True


BOUND_TICKS = 25  # rollouts (2) + ingest (1) + scores (1) + pairs (1) + a retraining in flight and its own (3 + 3),
# each asked at the next tick, with room to spare


@hsettings(max_examples=60, deadline=None)
@given(arrivals=st.lists(st.integers(0, 2), min_size=60, max_size=120), promote=st.lists(st.booleans(), min_size=3,
                                                                                          max_size=3))
def test_under_any_arrival_pattern_a_due_round_starts_within_bounded_ticks_and_after_its_rollouts(arrivals,
                                                                                                  promote):
    world = World()
    for _ in range(3):  # a history: ingested, paired, a champion
        world.land()
    due_since = None
    started = []
    for tick, arriving in enumerate(arrivals + [0] * 200):
        world.now = tick * TICK_S
        world.finish(tick, lambda number: promote[number - 1])
        if tick < len(arrivals):
            for _ in range(arriving):
                world.land()
        state = world.state()
        decision = decide(state, SETTINGS)
        for step in decision.steps:
            assert step.key not in world.running  # never a step in flight asked again
            if step.kind == "round":
                assert barrier_holds(world, state, step.round), (tick, step.round, decision)
                started.append((tick, step.round))
            world.start(step, tick, state)
        round_running = any(key.startswith(("round:", "rollout:")) for key in world.running)
        due = (world.version and not round_running and len(world.rounds) < SETTINGS.rounds
               and not any(s.kind == "round" for s in decision.steps))
        due_since = (due_since if due_since is not None else tick) if due else None
        assert due_since is None or tick - due_since <= BOUND_TICKS, (tick, due_since, decision)
        if len(world.rounds) == SETTINGS.rounds and not world.running and tick >= len(arrivals):
            break
    assert [number for _, number in started] == list(range(1, SETTINGS.rounds + 1))


def a_round(number, promoted=True, rollouts=None):
    return Round(number, f"grpo-r{number:04d}", promoted, 1000, "gsm8k", BASE, ("p1",),
                 rollout_batches=rollouts or {})


ROLLED_OUT = StepRuns(succeeded=frozenset({"rollout:1:grpo-r0001", f"rollout:1:{BASE}"}))
ROLLOUTS = {"grpo-r0001": ("mas-r1", "g5"), BASE: ("mas-base", "g6")}
INGESTED = (Batch("old", "old", "1", True), Batch("mas-r1", "mas-r1", "2", True),
            Batch("mas-base", "mas-base", "3", True))
AFTER_ROLLOUTS = LoopState(batches=INGESTED, ingested_batches=3, inputs="i2", pairs_inputs="i2", pairs=300,
                           new_pairs=10, champion=2, pairs_batches={"old": "g1", "mas-r1": "g5", "mas-base": "g6"},
                           trained_batches={"old": "g1"}, trained_at=1000.0, now=1100.0,
                           rounds=(a_round(1, rollouts=ROLLOUTS),), runs=ROLLED_OUT)


def round_asked(decision) -> bool:
    return any(s.kind == "round" for s in decision.steps)


def test_the_round_waits_for_each_part_of_its_rollouts_reaching_the_reward_model_and_says_which():
    assert round_asked(decide(AFTER_ROLLOUTS, SETTINGS))  # in the pairs, scored; no retraining due: it starts
    landing = dataclasses.replace(AFTER_ROLLOUTS, batches=INGESTED[:2] + (Batch("mas-base", "mas-base", "4", False),),
                                  runs=dataclasses.replace(ROLLED_OUT, in_flight=frozenset({"ingest:mas-base:4"})))
    waiting = decide(landing, SETTINGS)  # its ingest in flight: the round waits, and says for what
    assert not round_asked(waiting)
    assert "round:2 (waits for round 1's rollout batches to be ingested: mas-base)" in waiting.waiting
    unscored = decide(dataclasses.replace(AFTER_ROLLOUTS, batches_to_score=("mas-r1",)), SETTINGS)
    assert not round_asked(unscored) and any("scored by the champion: mas-r1" in w for w in unscored.waiting)
    stale = decide(dataclasses.replace(AFTER_ROLLOUTS, pairs_batches={"old": "g1", "mas-r1": "g5",
                                                                      "mas-base": "g3"}), SETTINGS)
    assert not round_asked(stale) and any("in the pairs: mas-base" in w for w in stale.waiting)
    due = dataclasses.replace(AFTER_ROLLOUTS, new_pairs=80)  # they made a retraining due: it comes first
    decision = decide(due, SETTINGS)
    assert not round_asked(decision) and [s.kind for s in decision.steps] == ["reward_model"]
    assert any("a retraining on round 1's rollout batches" in w for w in decision.waiting)
    trained = dataclasses.replace(due, trained_batches=AFTER_ROLLOUTS.pairs_batches)
    assert round_asked(decide(trained, SETTINGS))  # trained on them: other due retrainings do not hold it


def test_other_learning_work_holds_no_round_back():
    """New batches landing, their ingest in flight, stale pairs, unscored batches and a retraining for other data:
    none of it is the round's, so the round is asked beside it."""
    busy = dataclasses.replace(
        AFTER_ROLLOUTS, batches=INGESTED + (Batch("new", "new", "9", False), Batch("newer", "newer", "10", False)),
        inputs="i3", batches_to_score=("old",), new_pairs=80,
        trained_batches=AFTER_ROLLOUTS.pairs_batches,
        runs=dataclasses.replace(ROLLED_OUT, in_flight=frozenset({"ingest:new:9", "reward_model:i1"})))
    decision = decide(busy, SETTINGS)
    assert [s.kind for s in decision.steps] == ["round", "ingest", "scores", "pairs"]  # the rounds lane first


def test_a_retraining_the_round_does_not_need_is_deferred_while_its_rollouts_reach_the_pairs_up_to_the_bound():
    rolling = dataclasses.replace(AFTER_ROLLOUTS, new_pairs=80, pairs_batches={"old": "g1"},
                                  batches=INGESTED[:1] + (Batch("mas-r1", "mas-r1", "2", False),))
    decision = decide(rolling, SETTINGS)  # the reward model is 100 s old: the retraining waits
    assert [s.kind for s in decision.steps] == ["ingest"]
    assert any(w.startswith("reward_model:i2 (deferred: round 2 waits for round 1's rollouts") for w in
               decision.waiting)
    late = dataclasses.replace(rolling, batches=INGESTED[:1], now=1000.0 + SETTINGS.retrain_defer_s)
    assert [s.kind for s in decide(late, SETTINGS).steps] == ["reward_model"]  # past the bound it runs
    off = dataclasses.replace(rolling, batches=INGESTED[:1], rounds_on=False)  # no rounds: nothing to defer for
    assert [s.kind for s in decide(off, SETTINGS).steps] == ["reward_model"]


def test_a_retraining_given_up_holds_a_round_only_when_the_round_needs_it():
    gave_up = StepRuns(succeeded=ROLLED_OUT.succeeded, failures={"reward_model:i2": (2, "OOM")})
    other = dataclasses.replace(AFTER_ROLLOUTS, new_pairs=80, trained_batches=AFTER_ROLLOUTS.pairs_batches,
                                runs=gave_up)
    decision = decide(other, SETTINGS)
    assert round_asked(decision) and decision.failed == (("reward_model:i2", "OOM"),)
    needed = dataclasses.replace(other, trained_batches={"old": "g1"})
    decision = decide(needed, SETTINGS)
    assert not round_asked(decision) and decision.failed == (("reward_model:i2", "OOM"),)


def test_the_loop_command_stops_only_once_the_learning_lane_is_done_with_the_last_rollouts():
    last = dataclasses.replace(AFTER_ROLLOUTS, batches=INGESTED[:2] + (Batch("mas-base", "mas-base", "4", False),))
    decision = decide(last, dataclasses.replace(SETTINGS, rounds=1))
    assert decision.stopped == "the loop has run its 1 rounds" and [s.kind for s in decision.steps] == ["ingest"]
