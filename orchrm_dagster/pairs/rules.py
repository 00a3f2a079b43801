"""The pair rules' settings and the stable hashes they use, as plain Python.

The SQL in sql/pairs_*.sql computes the same values; the functions here are the reference that tests and
the pandas baseline check it against, and what importing published pairs uses.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Collection

from orchrm_dagster.contract import BASE_KIND, CHECKPOINT_KIND, DEFAULT_ENVIRONMENT, SPECIALIZED_KIND
from orchrm_dagster.engine_config import Field, engine_config

SPECIALIZED_OVER_BASE = "specialized_over_base"
CORRECT_OVER_INCORRECT = "correct_over_incorrect"
SOURCES = (SPECIALIZED_OVER_BASE, CORRECT_OVER_INCORRECT)
TRAIN, VALIDATION = "train", "validation"
SPLITS = (TRAIN, VALIDATION)

SPLIT_BUCKETS = 10_000
# Odd multipliers of the sample-rank mixing (sql/pairs_plans.sql and sql/pairs_per_problem.sql use them too).
_MASK32 = 0xFFFFFFFF
_SALT_MULTIPLIER = 0x9E3779B1  # 2654435761
_REJECTED_MULTIPLIER = 0x85EBCA6B  # 2246822507
_RANK_MULTIPLIER = 0xC2B2AE3D  # 3266489917


@engine_config
class PairRules:
    specialized_per_problem: int = Field(default=12, description="Cap of specialized-over-base pairs per problem")
    correct_per_problem: int = Field(default=4, description="Cap of correct-over-incorrect pairs per problem")
    mix_specialized: int = Field(default=3, description="Specialized-over-base share of the mix (the paper: 3)")
    mix_correct: int = Field(default=1, description="Correct-over-incorrect share of the mix (the paper: 1)")
    validation_fraction: float = Field(default=0.10, description="Share of problems whose pairs validate")
    seed: int = Field(default=0, description="Seeds which pairs the caps keep")
    import_files: tuple[str, ...] = Field(default=(), description="Pairs in the published OrchRM format (JSONL or "
                                          "Parquet: input, chosen, rejected, source; a path or s3:// URL) to train "
                                          "on as well (`orchrm export-pairs` writes them)")

    def __post_init__(self) -> None:
        if min(self.specialized_per_problem, self.correct_per_problem) < 1:
            raise ValueError("per-problem caps must be >= 1 (the mix would empty the other source anyway)")
        if min(self.mix_specialized, self.mix_correct) < 1:
            raise ValueError("mix weights must be >= 1 (the mix is always applied)")
        if not 0.0 <= self.validation_fraction <= 1.0:
            raise ValueError("validation_fraction must be within [0, 1]")

    @property
    def validation_cutoff(self) -> int:
        """A problem is in validation when its split bucket is below this."""
        return round(self.validation_fraction * SPLIT_BUCKETS)

    def mix_quotas(self, specialized: int, correct: int) -> tuple[int, int]:
        """How many pairs of each source to keep: the over-represented source is cut to the largest count
        that is not over-represented; the other is kept whole. When a source has no pairs at all (no labels
        yet, or a single policy kind), there is no ratio to keep and the other source is kept whole."""
        if min(specialized, correct) == 0:
            return specialized, correct
        if specialized * self.mix_correct > correct * self.mix_specialized:
            return correct * self.mix_specialized // self.mix_correct, correct
        return specialized, specialized * self.mix_correct // self.mix_specialized


def policy_side(kind: str | None, name: str | None, verified_checkpoints: Collection[str]) -> tuple[bool, bool]:
    """(specialized, base): whether a policy's runs win, or lose, specialized-over-base pairs. The one place this
    is decided (sql/pairs_plans.sql reads its answer for each policy of the runs).

    A `specialized` policy's runs win: an orchestrator whose quality was established outside this root's reward
    model, as in the paper. A `checkpoint`'s runs win only when it is one of `verified_checkpoints`, those this
    root promoted on measured held-out accuracy: a checkpoint trained against the reward model and promoted on its
    reward alone, not promoted, or unknown here (a user's batch) would otherwise win because the reward model
    preferred it, and teach the next reward model to prefer it more. A `base` policy's runs lose. Runs of every
    policy still make correct-over-incorrect pairs."""
    if kind == SPECIALIZED_KIND:
        return True, False
    if kind == CHECKPOINT_KIND:
        return name in verified_checkpoints, False
    return False, kind == BASE_KIND


def question_key(question: str) -> str:
    """What matches an imported pair's question to a known problem: Unicode NFKC, case folded, whitespace runs as
    one space, trimmed."""
    return " ".join(unicodedata.normalize("NFKC", question).casefold().split())


def _md5_prefix32(text: str) -> int:
    return int(hashlib.md5(text.encode()).hexdigest()[:8], 16)


def pair_id(problem_id: str, chosen_plan_hash: str, rejected_plan_hash: str,
            environment: str = DEFAULT_ENVIRONMENT) -> str:
    """Stable identity of a preference; the fixed-length plan hashes go first, so the joined text is unambiguous. A
    pair of another environment than the default one names it last (the same plans may pair in both)."""
    suffix = "" if environment == DEFAULT_ENVIRONMENT else f":{environment}"
    return hashlib.md5(f"{chosen_plan_hash}:{rejected_plan_hash}:{problem_id}{suffix}".encode()).hexdigest()


def split_bucket(problem_id: str) -> int:
    return _md5_prefix32(problem_id) % SPLIT_BUCKETS


def split_for(problem_id: str, rules: PairRules) -> str:
    return VALIDATION if split_bucket(problem_id) < rules.validation_cutoff else TRAIN


def seed_mask(seed: int) -> int:
    return _md5_prefix32(str(seed))


def plan_salt(seed: int, plan_hash: str) -> int:
    """A seeded 32-bit number per plan, from its (already uniformly distributed) BLAKE2b hash."""
    return ((int(plan_hash[:8], 16) ^ seed_mask(seed)) * _SALT_MULTIPLIER) & _MASK32


def sample_rank(seed: int, chosen_plan_hash: str, rejected_plan_hash: str) -> int:
    """Order in which a problem's pairs of one source are kept by its cap (lowest first); ties go to the
    lower (chosen, rejected) plan hashes.

    Mixed from per-plan numbers with integer arithmetic rather than hashed per pair: a problem's candidate
    pairs grow with the square of its plans, and hashing each one would cost more than the rest of the build."""
    return rank_from_salts(plan_salt(seed, chosen_plan_hash), plan_salt(seed, rejected_plan_hash))


def rank_from_salts(chosen_salt, rejected_salt):
    """sample_rank from plan salts; works on ints and on numpy uint64 arrays alike."""
    mixed = chosen_salt ^ ((rejected_salt * _REJECTED_MULTIPLIER) & _MASK32)
    return (mixed * _RANK_MULTIPLIER) & _MASK32
