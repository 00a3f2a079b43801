"""Win-lose plan pairs for the reward model (pure Python + DuckDB SQL, no Dagster)."""

from .build import PAIRS, PairStats, build_pairs
from .published import IMPORTED_PAIRS, ImportedPairs, export_published, import_published
from .rules import (CORRECT_OVER_INCORRECT, SOURCES, SPECIALIZED_OVER_BASE, SPLITS, TRAIN, VALIDATION, PairRules,
                    pair_id, sample_rank, split_for)
from .texts import PAIR_TEXTS_SQL, pair_texts, pair_texts_sql

__all__ = [
    "PairRules", "PairStats", "build_pairs", "PAIRS",
    "ImportedPairs", "IMPORTED_PAIRS", "export_published", "import_published",
    "PAIR_TEXTS_SQL", "pair_texts_sql", "pair_texts",
    "SPECIALIZED_OVER_BASE", "CORRECT_OVER_INCORRECT", "SOURCES", "TRAIN", "VALIDATION", "SPLITS",
    "pair_id", "split_for", "sample_rank",
]
