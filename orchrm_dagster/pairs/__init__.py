"""Win-lose plan pairs for the reward model: DuckDB builds them set-based, Polars mixes and assembles texts."""

from .build import PairStats, PolicyRuns, build_pairs, mix_sources
from .mix import MixCheck, mix_within_tolerance
from .published import (PUBLISHED_FIELDS, PUBLISHED_FORMATS, ImportedPairs, KnownProblems, export_published,
                        import_published, normalise_source, published_format, write_published)
from .rules import (CORRECT_OVER_INCORRECT, SOURCES, SPECIALIZED_OVER_BASE, SPLITS, TRAIN, VALIDATION, PairRules,
                    pair_id, plan_salt, policy_side, question_key, rank_from_salts, sample_rank, split_for)
from .table import (PairContext, PairsOutcome, build_pairs_table, current_pair_ids, export_pairs, load_rules,
                    pairs_batches, pairs_inputs, save_rules, training_pair_texts)
from .texts import PAIR_TEXT_COLUMNS, pair_texts

__all__ = [
    "CORRECT_OVER_INCORRECT", "ImportedPairs", "KnownProblems", "MixCheck", "PAIR_TEXT_COLUMNS", "PUBLISHED_FIELDS",
    "PUBLISHED_FORMATS", "PairContext", "PairRules", "PairStats", "PairsOutcome", "PolicyRuns", "SOURCES",
    "SPECIALIZED_OVER_BASE", "SPLITS", "TRAIN", "VALIDATION", "build_pairs", "build_pairs_table", "current_pair_ids",
    "export_pairs", "export_published", "import_published", "load_rules", "mix_sources",
    "mix_within_tolerance", "normalise_source", "pairs_batches", "pairs_inputs", "pair_id", "pair_texts", "plan_salt", "policy_side",
    "published_format", "question_key", "rank_from_salts", "sample_rank", "save_rules", "split_for",
    "training_pair_texts", "write_published",
]
