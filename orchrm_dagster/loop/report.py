"""What `orchrm status` says of the loop, read from the state the sensors decide from: the decision the daemon would
take now, each domain's champion (or why there is none and what would change that), the last rounds, the tokens
spent against the budget, and what waited longer than the freshness windows the UI's freshness policies use."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from orchrm_dagster.grpo import read_table
from orchrm_dagster.loop.decide import Decision, decide, describe
from orchrm_dagster.loop.settings import LoopSettings
from orchrm_dagster.loop.state import LoopState, Spending
from orchrm_dagster.rm import champion_standings, latest_version, staleness, trained_at
from orchrm_dagster.storage import StorageRoot


@dataclass(frozen=True)
class Late:
    """Something that waited longer than its freshness window: a batch for the champion's scores, or the reward
    model for its next training."""

    what: str  # a batch id, or "reward_model"
    waited_s: float
    window: str  # the LoopSettings field that sets the window
    window_s: float

    def line(self) -> str:
        if self.what == "reward_model":
            return (f"the latest reward model trained {_hours(self.waited_s)} ago, longer than {self.window} "
                    f"({_hours(self.window_s)}): the UI marks reward_model failing its freshness policy")
        return (f"batch {self.what} has waited {_hours(self.waited_s)} for the champion's scores, longer than "
                f"{self.window} ({_hours(self.window_s)}): the UI marks rm_scores failing its freshness policy")


@dataclass(frozen=True)
class LoopReport:
    decision: Decision
    failed: tuple[tuple[str, int, str], ...]  # (step key, failed runs, latest cause) of the steps given up on
    champions: tuple  # rm.Standing, one a domain
    rounds: tuple[dict, ...]  # the last rows of grpo_rounds
    spent: Spending
    token_budget: int | None
    late: tuple[Late, ...]
    live: tuple = ()  # (rm.live.LiveAccuracy, stale, why) of each champion's live measures

    @property
    def summary(self) -> str:
        return describe(self.decision)

    def budget_line(self) -> str:
        if self.token_budget is None:
            return f"tokens: {self.spent.text()} spent by the loop; no token_budget set"
        left = self.token_budget - self.spent.total
        state = f"{left:,} left" if left > 0 else "spent: no round starts"
        return f"tokens: {self.spent.text()} of the {self.token_budget:,} token_budget ({state})"

    def to_json(self) -> dict:
        decision = self.decision
        return {
            "summary": self.summary,
            "next": [{"kind": s.kind, "key": s.key, "why": s.why, "attempt": s.attempt + 1} for s in decision.steps],
            "waiting": list(decision.waiting), "blocked": decision.blocked, "stopped": decision.stopped,
            "failed": [{"step": key, "attempts": attempts, "cause": cause} for key, attempts, cause in self.failed],
            "champions": [{**asdict(s), "problem": s.problem} for s in self.champions],
            "rounds": list(self.rounds),
            "live_accuracy": [{"domain": m.domain, "champion": m.rm_version, "source": m.source, "pairs": m.pairs,
                               "accuracy": m.accuracy, "interval": m.interval(),
                               "validation_accuracy": m.validation_accuracy, "stale": stale, "why": why}
                              for m, stale, why in self.live],
            "tokens": {"spent": self.spent.total, **{f"spent_{k}": v for k, v in asdict(self.spent).items()},
                       "budget": self.token_budget},
            "late": [{**asdict(late), "line": late.line()} for late in self.late],
        }


def loop_report(root: StorageRoot, state: LoopState, settings: LoopSettings, last_rounds: int = 5) -> LoopReport:
    decision = decide(state, settings)
    failed = tuple((key, state.runs.failures.get(key, (0, ""))[0], cause) for key, cause in decision.failed)
    return LoopReport(decision, failed, tuple(champion_standings(root)),
                      tuple(read_table(root, "grpo_rounds")[-last_rounds:]),
                      state.spending(settings.rollout_seed, settings.rollout_base),
                      settings.token_budget, _late_scores(root, state, settings) + _late_model(root, settings),
                      tuple((m, *staleness(m, settings.staleness_rule())) for m in state.live))


def _late_scores(root: StorageRoot, state: LoopState, settings: LoopSettings) -> tuple[Late, ...]:
    """Each batch without the champion's scores, waiting since its runs were written or the newest champion was
    crowned (whichever came later), past `scores_within_s`."""
    if state.champion is None:
        return ()
    crowned = trained_at(root, state.champion) or 0.0
    late = []
    for batch in state.batches_to_score:
        waited = state.now - max(root.batch_written_at("runs", batch) or 0.0, crowned)
        if waited > settings.scores_within_s:
            late.append(Late(batch, waited, "scores_within_s", settings.scores_within_s))
    return tuple(late)


def _late_model(root: StorageRoot, settings: LoopSettings) -> tuple[Late, ...]:
    version = latest_version(root)
    trained = trained_at(root, version) if version is not None else None
    waited = time.time() - trained if trained is not None else 0.0
    return (Late("reward_model", waited, "champion_within_s", settings.champion_within_s),) if (
        waited > settings.champion_within_s) else ()


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds < 2 * 86400 else f"{seconds / 86400:.1f} days"
