"""What the loop decides from: the data under the storage root, and the runs the orchestrator has made."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from orchrm_dagster.storage import LandedFile


@dataclass(frozen=True)
class Batch:
    """A run batch: landed files ingested together (one ingest run, one `run_batches` partition)."""

    batch_id: str
    name: str  # its file's name, or `first.jsonl +59 files`
    fingerprint: str  # of its files' content as landed now
    ingested: bool  # its content as landed now is ingested and labeled
    files: tuple[str, ...] = ()  # its files' names (empty: the one named `name`)
    failed_files: tuple[tuple[str, str], ...] = ()  # (name, cause): files its latest ingest could not read


@dataclass(frozen=True)
class Round:
    """A finished GRPO round."""

    round: int
    policy: str  # its checkpoint's name as a policy
    promoted: bool
    tokens: int  # every token it spent (grpo.round_tokens)
    benchmark: str
    base_policy: str  # the policy whose plans its checkpoint's are preferred over
    train_problems: tuple[str, ...]
    rm_version: int | None = None  # the champion that rewarded it
    registered: bool = True  # False: its verdict is recorded, its published checkpoint not yet a policy (its attempt
    # was killed in between: `grpo.commit_round`); the round is asked again, and its next attempt registers it
    # policy -> (batch id, its runs' generation; "" while none are ingested) of the batch its rollout landed, for each
    # policy whose rollout file is in the batch index (a promoted round's; `grpo.rollout_batches`)
    rollout_batches: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    attempt: str | None = None  # the attempt that committed its row (its tokens' journal: orchrm_dagster.spending)


@dataclass(frozen=True)
class StepRuns:
    """The orchestrator's runs of the loop's steps, by step key. Only membership and `failures.get(key)` are asked
    for, so the orchestrator's layer may answer each key by looking up that key's runs (no window of recent runs that
    a long stream outgrows)."""

    in_flight: Collection[str] = frozenset()  # iterated too: every step in flight
    succeeded: Collection[str] = frozenset()
    failures: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # key -> (failed runs since its latest
    # success, the latest one's cause)


@dataclass(frozen=True)
class LoopState:
    batches: tuple[Batch, ...] = ()
    pending: tuple[LandedFile, ...] = ()  # landed files no batch holds yet
    paced_cuts: tuple[float, ...] = ()  # when the earlier batches cut by the batching rate were cut
    now: float = 0.0  # when the state was read (seconds since the epoch)
    ingested_batches: int = 0  # run batches in the tables
    inputs: str = ""  # the ingested batches as they are now (the batch index's `inputs`)
    pairs_inputs: str | None = None  # the ingested batches the pairs were built from (None: no pairs yet)
    pairs: int = 0  # pairs reward-model training reads (built and imported)
    new_pairs: int | None = None  # pairs added since the reward model last trained (None: it never did)
    trained_on: tuple[str, ...] | None = None  # pair sources the latest reward model trained on (empty: every one)
    champion: int | None = None
    no_champion: Mapping[str, str] = field(default_factory=dict)  # domain -> why it has no champion (those without)
    batches_to_score: tuple[str, ...] = ()  # run batches without the champion's scores of their current runs
    # batch id -> runs generation of the batches the pairs were built from, and those the latest reward model's
    # pairs were built from (None: not recorded, or nothing built or trained yet)
    pairs_batches: Mapping[str, str] | None = None
    trained_batches: Mapping[str, str] | None = None
    trained_at: float | None = None  # when the latest reward model finished training (seconds since the epoch)
    champion_at: float | None = None  # when the newest champion finished training
    # the champions' live accuracy on what they never trained on (rm.live): the new pairs', and the latest round's
    # held-out plans', by domain
    live: tuple = ()
    rounds_on: bool = True  # whether the rounds' part of the loop runs (its sensor is on; `orchrm loop`)
    rounds: tuple[Round, ...] = ()
    runs: StepRuns = StepRuns()
    # what the loop spent beside its rounds (loop.read): the rollouts' runs (orchestrator and sub-agent tokens), by
    # (the seed they were sampled with, whether the base policy made them), and the reward-model retrainings since
    # the first round (training and rescoring)
    rollout_tokens: Mapping[tuple[int, bool], int] = field(default_factory=dict)
    retraining_tokens: int = 0
    # rounds' attempts that committed no row (killed, failed, given up), from their journals (orchrm_dagster.spending)
    unfinished_round_tokens: int = 0
    largest_round_tokens: int = 0  # the most tokens one round's attempt spent: what the next one may spend

    @cached_property
    def ingested(self) -> frozenset[str]:
        """The batches whose content as landed now is ingested (read once per state: a root holds thousands)."""
        return frozenset(b.batch_id for b in self.batches if b.ingested)

    def spending(self, rollout_seed: int, rollout_base: bool = True) -> Spending:
        """Every token the loop has spent, by where it was spent (its rollouts: sampled with `rollout_seed`, the base
        policy's with `rollout_base`)."""
        rollouts = self.rollout_tokens.get((rollout_seed, False), 0)
        if rollout_base:
            rollouts += self.rollout_tokens.get((rollout_seed, True), 0)
        return Spending(sum(r.tokens for r in self.rounds) + self.unfinished_round_tokens, rollouts,
                        self.retraining_tokens, self.unfinished_round_tokens)


@dataclass(frozen=True)
class Spending:
    """The loop's tokens by where they were spent: what `token_budget` and `orchrm status` count."""

    rounds: int  # the rounds' own: generation, reward, rollouts for rewards, training, held-out measures
    # (grpo.round_tokens)
    rollouts: int  # the promoted checkpoints' (and the base policy's) rollouts: plans sampled and executed
    retraining: int  # reward-model versions trained since the first round, the rescoring of the runs by them, and the
    # scoring of the loop's rollouts by any version
    unfinished: int = 0  # of `rounds`: attempts that committed nothing (killed, failed, given up)

    @property
    def total(self) -> int:
        return self.rounds + self.rollouts + self.retraining

    def text(self) -> str:
        unfinished = f", {self.unfinished:,} of it in attempts that did not finish" if self.unfinished else ""
        return (f"{self.total:,} tokens (rounds {self.rounds:,}{unfinished}, rollouts {self.rollouts:,}, "
                f"reward-model retraining {self.retraining:,})")
