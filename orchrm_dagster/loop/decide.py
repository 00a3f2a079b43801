"""The loop's rules, written once: from the loop's state, what happens next. The daemon's sensors and
`orchrm loop` both ask this function and request exactly the steps it returns.

Two lanes, decided apart, so that neither waits for a lull in the other:

- the learning lane, each step of the chain as it falls due: ingest what landed; score new batches with the
  champion; rebuild pairs from what is ingested; retrain the reward model once enough new pairs arrived;
- the rounds lane: roll out the last promoted checkpoint, then start the next round, until the rounds or the token
  budget are spent. A round waits only for what it depends on: a champion for its domain, and the last promoted
  round's rollout batches ingested, scored, in the pairs and, where they made a retraining due, trained on (the
  barrier). While it waits for its rollouts to reach the pairs, a retraining that would not read them is deferred,
  up to `retrain_defer_s`.

While the rounds' domain has no champion reward model (none trained yet, or none whose validation accuracy beat
chance), the rounds lane is blocked and says why. A step whose run is in flight is waited for; a step that failed
`max_attempts` times is given up on and reported with its cause. A batch that failed holds nothing: the chain goes on
with the batches that are ingested. The rounds lane's steps come first: `orchrm loop` runs them in that order.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

from orchrm_dagster.grpo import GRPOSettings
from orchrm_dagster.loop.batching import cut_batches
from orchrm_dagster.loop.settings import LoopSettings
from orchrm_dagster.loop.state import Batch, LoopState, Round
from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings
from orchrm_dagster.storage import NewBatch, batch_name, files_fingerprint, ingested_state
from orchrm_dagster.rm import RMTrainConfig, domain_of

StepKind = Literal["ingest", "pairs", "reward_model", "scores", "rollout", "round"]
# steps whose key holds their inputs: a newer one replaces an earlier one still queued or running, so it waits for it
SUPERSEDING: tuple[StepKind, ...] = ("pairs", "reward_model", "scores")
LEARNING: tuple[StepKind, ...] = ("ingest", "pairs", "reward_model", "scores")  # run whether rounds are on or not
ROUNDS: tuple[StepKind, ...] = ("rollout", "round")  # the GRPO part, when the loop is switched on


@dataclass(frozen=True)
class Step:
    kind: StepKind
    key: str  # the work itself: its runs carry the key, so the same work is never asked for twice at once
    attempt: int  # earlier failed runs of the same key
    why: str
    batch: Batch | None = None  # ingest
    cut: NewBatch | None = None  # ingest of a batch this decision cut, recorded (assets/loop.py prepare_steps) first
    round: int | None = None  # rollout (the checkpoint's round), round (the round to start)
    benchmark: str | None = None  # rollout
    policy: str | None = None  # rollout
    sampling: PlanSamplingSettings | None = None  # rollout
    execution: ExecutionSettings | None = None  # rollout
    grpo: GRPOSettings | None = None  # round
    reward_model: RMTrainConfig | None = None  # reward_model

    @property
    def run_key(self) -> str:
        return f"{self.key}#{self.attempt}"


@dataclass(frozen=True)
class Decision:
    steps: tuple[Step, ...] = ()
    waiting: tuple[str, ...] = ()  # steps in flight
    blocked: str | None = None  # what no step of the loop's own can bring (no champion for the rounds' domain: why)
    failed: tuple[tuple[str, str], ...] = ()  # (step key, cause) of steps given up on
    stopped: str | None = None  # the rounds are done, and why
    notes: tuple[str, ...] = ()  # why nothing was asked where something could have been (a fresh champion)


def describe(decision: Decision) -> str:
    """What the loop is doing or waiting for, in one line (a sensor tick's reason, `orchrm status`, a log line)."""
    parts = [f"asked: {', '.join(f'{s.key} ({s.why})' for s in decision.steps)}"] if decision.steps else []
    parts += [f"waiting: {', '.join(decision.waiting)}"] if decision.waiting else []
    parts += [f"blocked: {decision.blocked}"] if decision.blocked else []
    parts += [f"gave up: {'; '.join(f'{key}: {cause}' for key, cause in decision.failed)}"] if decision.failed else []
    parts += [f"stopped: {decision.stopped}"] if decision.stopped else []
    parts += [f"note: {note}" for note in decision.notes]
    return " | ".join(parts) or "nothing to do"


@dataclass
class _Draft:
    state: LoopState
    settings: LoopSettings
    steps: list[Step] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    blocked: str | None = None
    failed: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def ask(self, step: Step) -> None:
        """Adds `step` unless its run is in flight (then it is waited for) or it failed too often (then it is
        given up on). Any of the three holds what follows it in the chain."""
        runs = self.state.runs
        if step.key in runs.in_flight:
            self.waiting.append(f"{step.key} (in flight)")
            return
        earlier = next((key for key in sorted(runs.in_flight) if key.startswith(f"{step.kind}:")), None)
        if step.kind in SUPERSEDING and earlier is not None:
            # its inputs moved on since that run was asked for: the next decision asks once, with the latest
            self.waiting.append(f"{earlier} (in flight; {step.key} after it)")
            return
        attempts, cause = runs.failures.get(step.key, (0, ""))
        if attempts >= self.settings.max_attempts:
            self.failed.append((step.key, cause))
            return
        self.steps.append(dataclasses.replace(step, attempt=attempts))


def ingest_step(batch: Batch, cut: NewBatch | None = None) -> Step:
    """Ingesting one batch as its files are landed now (a file replaced since is another step); `cut`: the batch as
    this decision cut it, to be recorded before the step runs."""
    return Step("ingest", f"ingest:{batch.batch_id}:{batch.fingerprint}", 0, f"{batch.name} landed", batch=batch,
                cut=cut)


@dataclass(frozen=True)
class BatchState:
    batch_id: str
    name: str
    state: str  # ingested | ingested, N of M files failed | ingesting | failed (N runs) | landed
    cause: str = ""
    failed_files: tuple[tuple[str, str], ...] = ()  # (file, cause): files its latest ingest could not read

    @property
    def failed(self) -> bool:
        return self.state.startswith("failed") or bool(self.failed_files)


def batch_states(state: LoopState) -> list[BatchState]:
    """Each batch: ingested, being ingested, failed (with the cause of its latest run), or landed and not yet
    asked for; an ingested batch with files its ingest could not read names them, each with its cause. A failed
    batch or file stays failed until it is re-ingested or lands again with other content."""
    found = []
    for batch in state.batches:
        if batch.ingested:  # most of them: its step's runs need not be looked up
            name, cause = ingested_state(len(batch.files), batch.failed_files)
            found.append(BatchState(batch.batch_id, batch.name, name, cause, batch.failed_files))
            continue
        key = ingest_step(batch).key
        attempts, cause = state.runs.failures.get(key, (0, ""))
        if key in state.runs.in_flight:
            name, cause = "ingesting", ""
        elif attempts:
            name = f"failed ({attempts} run{'s' if attempts > 1 else ''})"
        else:
            name = "landed"
        found.append(BatchState(batch.batch_id, batch.name, name, cause))
    return found


def unclean_batch_states(state: LoopState, reported: Collection[str] = ()) -> list[BatchState]:
    """The states of the batches that are not cleanly ingested (not ingested, or with files that failed), and of
    those in `reported` (whose failure was reported): what the loop's sensor reports each tick, a few whatever the
    number of batches."""
    unclean = [b for b in state.batches if not b.ingested or b.failed_files or b.batch_id in reported]
    return batch_states(dataclasses.replace(state, batches=tuple(unclean)))


def decide(state: LoopState, settings: LoopSettings) -> Decision:
    rounds = _Draft(state, settings)
    stopped = _rounds(rounds)
    learning = _Draft(state, settings)
    _learning_lane(learning)
    return Decision(tuple(rounds.steps + learning.steps), tuple(learning.waiting + rounds.waiting), rounds.blocked,
                    tuple(rounds.failed + learning.failed), stopped, tuple(rounds.notes + learning.notes))


def _learning_lane(draft: _Draft) -> None:
    """Each step of the chain that is due, asked together: ingest what landed, score new batches with the champion,
    rebuild the pairs, retrain the reward model. None waits for another to be asked: under a steady stream one of
    them is nearly always due, and a chain that asked one at a time starved those behind it (a soak of a batch every
    2 minutes scored none in an hour, 2026-12-03; a model of the stream, tests/loop/test_stream.py, never retrained
    while a batch landed every third tick). A step in flight is waited for, and one whose inputs moved on since is
    asked once it ended (`SUPERSEDING`); the warehouse and model pools run them one at a time."""
    state = draft.state
    for batch in state.batches:
        if not batch.ingested:
            draft.ask(ingest_step(batch))
    _cut_landed(draft)
    if state.champion is not None and state.batches_to_score:
        draft.ask(Step("scores", f"scores:v{state.champion}:{state.inputs}", 0,
                       f"{len(state.batches_to_score)} batches without the champion's scores"))
    if state.ingested_batches and state.pairs_inputs != state.inputs:
        draft.ask(Step("pairs", f"pairs:{state.inputs}", 0, "the ingested batches changed"))
    step = retraining(state, draft.settings)
    if step is None:
        if state.new_pairs and state.champion is not None and draft.settings.retrain_on == "stale":
            _, fresh = freshness(state, draft.settings)
            draft.notes.append(f"no retraining: {'; '.join(fresh) or 'no live measure of the champion yet'}")
        return
    deferred = _deferred_by_round(state, draft.settings)
    if deferred:
        draft.waiting.append(f"{step.key} (deferred: {deferred})")
        return
    draft.ask(step)


def _cut_landed(draft: _Draft) -> None:
    """The landed files no batch holds yet, cut into new batches as `settings.batching` says (loop.batching); what
    waits for a later cut is waited for, and holds nothing."""
    state = draft.state
    if not state.pending:
        return
    cut = cut_batches(state.pending, state.paced_cuts, state.now, draft.settings.batching)
    landed = {f.name: f for f in state.pending}
    for new in cut.batches:
        files = [landed[name] for name in new.files]
        draft.ask(ingest_step(Batch(new.batch_id, batch_name(new.files), files_fingerprint(files), False, new.files),
                              cut=new))
    if cut.waiting:
        when = time.strftime("%H:%M:%S UTC", time.gmtime(cut.next_at))
        draft.waiting.append(f"{cut.waiting} landed file(s) (their batch is cut by {when}, unless it fills first)")


def retraining(state: LoopState, settings: LoopSettings) -> Step | None:
    """The reward model's retraining when one is due, else None: no reward model yet; the rounds' recipe trains on
    other pair sources; and, with new pairs since the latest version trained, a stale champion (`retrain_on` stale:
    `staleness`), a champion older than `champion_within_s`, or (`retrain_on` new_pairs, or no champion yet)
    `retrain_min_new_pairs` new pairs."""
    config = settings.reward_model_config()
    if not state.pairs or settings.round.reward_model == "none":  # an execution-only loop trains no reward model
        return None
    why = _retraining_due(state, settings, config)
    if why is None:
        return None
    recipe = f":{','.join(config.pair_sources)}" if config.pair_sources else ""
    return Step("reward_model", f"reward_model:{state.inputs}{recipe}", 0, why, reward_model=config)


def _retraining_due(state: LoopState, settings: LoopSettings, config) -> str | None:
    if state.new_pairs is None:
        return "no reward model yet"
    if state.trained_on is not None and state.trained_on != config.pair_sources:
        return (f"the rounds' recipe trains it on {', '.join(config.pair_sources) or 'every'} pairs, the latest on "
                f"{', '.join(state.trained_on) or 'every source'}")
    if not state.new_pairs:
        return None
    counted = (f"{state.new_pairs} new pairs since the reward model last trained "
               f"(retrains at {settings.retrain_min_new_pairs})")
    # with no champion to measure (none yet, or none for the rounds' domain, which the rounds wait for) pairs counted
    if (settings.retrain_on == "new_pairs" or state.champion is None
            or domain_of(settings.round.benchmark) in state.no_champion):
        return counted if state.new_pairs >= settings.retrain_min_new_pairs else None
    stale, _ = freshness(state, settings)
    if stale:
        return f"the champion is {'; '.join(stale)} ({state.new_pairs} new pairs)"
    age = state.now - state.champion_at if state.champion_at is not None else None
    if age is not None and age >= settings.champion_within_s:
        return (f"the champion is {age / 3600:.1f} h old (champion_within_s {settings.champion_within_s:.0f}) and "
                f"{state.new_pairs} pairs are new")
    return None


def freshness(state: LoopState, settings: LoopSettings, domain: str | None = None) -> tuple[list[str], list[str]]:
    """(why the champion is stale, why it is fresh) in each domain (only `domain`'s where given), from its live
    measures that say either (`rm.live.staleness`: one rule, for the retraining and the rollouts)."""
    from orchrm_dagster.rm import staleness

    stale, fresh = [], []
    rule = settings.staleness_rule()
    for live in state.live:
        if domain is not None and live.domain != domain:
            continue
        is_stale, why = staleness(live, rule)
        if is_stale is not None:
            (stale if is_stale else fresh).append(why)
    return stale, fresh


def _deferred_by_round(state: LoopState, settings: LoopSettings) -> str | None:
    """Why a due retraining waits, or None: the next round waits for the last promoted round's rollouts to reach the
    pairs, a retraining now would not read them (and would hold the reward model's slot when the round's own
    retraining is due), and the latest reward model is younger than `retrain_defer_s`."""
    last = _last_promoted(state)
    if (not state.rounds_on or last is None or len(state.rounds) >= settings.rounds or state.trained_at is None
            or not _rollouts_outside_pairs(state, settings, last)):
        return None
    age = state.now - state.trained_at
    if age >= settings.retrain_defer_s:
        return None
    return (f"round {state.rounds[-1].round + 1} waits for round {last.round}'s rollouts to reach the pairs; the "
            f"reward model trained {age / 60:.0f} min ago (retrain_defer_s {settings.retrain_defer_s:.0f})")


def _last_promoted(state: LoopState) -> Round | None:
    return next((r for r in reversed(state.rounds) if r.promoted), None)


def _rollout_policies(state: LoopState, settings: LoopSettings, last: Round) -> tuple[str, ...]:
    """The policies that roll out after `last` (none where `rollouts` is auto and its domain's champion is fresh)."""
    if _rollouts_skipped(state, settings, last):
        return ()
    return (last.policy, last.base_policy) if settings.rollout_base else (last.policy,)


def _rollouts_skipped(state: LoopState, settings: LoopSettings, last: Round) -> str | None:
    """Why `last` rolls out nothing (`rollouts` auto: its domain's champion has a live measure and none says it is
    stale, so new pairs would teach it nothing it lacks), or None."""
    asked = (f"rollout:{last.round}:{p}" for p in (last.policy, last.base_policy))
    if settings.round.reward_model == "none":
        return (f"round {last.round} rolls out nothing: an execution-only loop (round.reward_model none) has no "
                f"reward model to make pairs for")
    if settings.rollouts == "always" or any(k in state.runs.succeeded or k in state.runs.in_flight for k in asked):
        return None
    stale, fresh = freshness(state, settings, domain_of(last.benchmark or settings.round.benchmark))
    if stale or not fresh:
        return None
    return f"round {last.round} rolls out nothing: the champion is {fresh[-1]}"


def _rollouts_outside_pairs(state: LoopState, settings: LoopSettings, last: Round) -> bool:
    """Whether any rollout of `last` has not yet reached the pairs (not run, not landed, not ingested, or its batch
    as ingested now not among those the pairs were built from)."""
    if any(f"rollout:{last.round}:{p}" not in state.runs.succeeded for p in _rollout_policies(state, settings, last)):
        return True
    return any(not _in(state.pairs_batches, b) for b in _rollout_batches(state, settings, last))


def _rollout_batches(state: LoopState, settings: LoopSettings, last: Round) -> list[tuple[str, str]]:
    """(batch id, runs generation) of each batch `last`'s rollouts landed, but those ingested with no runs."""
    landed = [last.rollout_batches[p] for p in _rollout_policies(state, settings, last) if p in last.rollout_batches]
    return [b for b in landed if b[1] or b[0] not in state.ingested]


def _in(recorded: Mapping[str, str] | None, batch: tuple[str, str]) -> bool:
    batch_id, generation = batch
    return bool(generation) and recorded is not None and recorded.get(batch_id) == generation


def _barrier(state: LoopState, settings: LoopSettings, last: Round) -> str | None:
    """What the next round waits for of `last`'s rollouts (None: nothing): their batches ingested, scored by the
    champion, in the pairs, and trained on where they made a retraining due. A rollout that landed no batch leaves
    nothing to wait for."""
    landed = _rollout_batches(state, settings, last)
    names = lambda batches: ", ".join(batch_id for batch_id, _ in batches)  # noqa: E731
    waits = [(what, pending) for what, pending in (
        ("ingested", [b for b in landed if b[0] not in state.ingested or not b[1]]),
        ("scored by the champion", [b for b in landed if b[0] in state.batches_to_score]),
        ("in the pairs", [b for b in landed if not _in(state.pairs_batches, b)]),
    ) if pending]
    if waits:
        what, pending = waits[0]
        return f"round {last.round}'s rollout batches to be {what}: {names(pending)}"
    untrained = [b for b in landed if not _in(state.trained_batches, b)]
    if untrained and retraining(state, settings) is not None:
        return f"a retraining on round {last.round}'s rollout batches ({names(untrained)}), which made it due"
    return None


def _rounds(draft: _Draft) -> str | None:
    """The rounds lane; returns why the rounds stopped, or None."""
    state, settings = draft.state, draft.settings
    domain = domain_of(settings.round.benchmark)
    # `read_state` names every domain without a champion, and why (an execution-only loop needs none)
    if settings.round.reward_model == "champion" and domain in state.no_champion:
        # no round is rewarded by a reward model that has not shown, on held-out pairs, that it learned
        draft.blocked = state.no_champion[domain]
        return None
    last = state.rounds[-1] if state.rounds else None
    if last is not None and not last.registered:  # killed between its verdict and its checkpoint's registration
        draft.ask(Step("round", f"round:{last.round}", 0, f"round {last.round}'s checkpoint to register",
                       round=last.round, grpo=settings.round))
        return None
    if last is not None and last.promoted and _rollout(draft, last):
        return None
    skipped = _rollouts_skipped(state, settings, last) if last is not None and last.promoted else None
    if skipped:
        draft.notes.append(skipped)
    if len(state.rounds) >= settings.rounds:
        return f"the loop has run its {settings.rounds} rounds"
    spent = state.spending(settings.rollout_seed, settings.rollout_base)
    if settings.token_budget is not None and spent.total >= settings.token_budget:
        return f"the loop has spent its token budget ({spent.text()} of {settings.token_budget:,})"
    if settings.token_budget is not None and spent.total + state.largest_round_tokens > settings.token_budget:
        return (f"the next round could overrun the token budget: {spent.text()} spent of {settings.token_budget:,}, "
                f"and a round's attempt has spent up to {state.largest_round_tokens:,}")
    number = (last.round if last else 0) + 1
    promoted = _last_promoted(state)
    waits = _barrier(state, settings, promoted) if promoted is not None else None
    if waits:
        draft.waiting.append(f"round:{number} (waits for {waits})")
        return None
    draft.ask(Step("round", f"round:{number}", 0, f"round {number} of {settings.rounds}", round=number,
                   grpo=settings.round))
    return None


def _rollout(draft: _Draft, last) -> bool:
    """The promoted checkpoint (and the base policy) executes plans on the round's training problems once."""
    settings = draft.settings
    policies = _rollout_policies(draft.state, settings, last)
    # tagged with the execution's key: the base policy's rollout never stands on the main job's runs, made otherwise
    sampling = PlanSamplingSettings(n_samples=settings.rollout_samples, problem_ids=last.train_problems,
                                    seed=settings.rollout_seed, run_tag=settings.rollout_execution.run_tag)
    pending = [p for p in policies if f"rollout:{last.round}:{p}" not in draft.state.runs.succeeded]
    for policy in pending:
        draft.ask(Step("rollout", f"rollout:{last.round}:{policy}", 0, f"round {last.round}'s checkpoint rolls out",
                       round=last.round, benchmark=last.benchmark, policy=policy, sampling=sampling,
                       execution=settings.rollout_execution))
    return bool(pending)
