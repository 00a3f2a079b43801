"""What reward-model training reads: every pair with its question and both plan texts (Polars, lazy)."""

from __future__ import annotations

import polars as pl

PAIR_TEXT_COLUMNS = ("pair_id", "problem_id", "split", "source", "question", "chosen_plan", "rejected_plan")


def pair_texts(pairs: pl.LazyFrame, runs: pl.LazyFrame, imported: pl.LazyFrame | None = None) -> pl.LazyFrame:
    """Each built pair with the question and the plans of its chosen and rejected runs (a pair whose runs are
    gone is left out), plus the imported published pairs when given."""
    texts = runs.select("run_id", "question", "plan")
    built = (pairs.select("pair_id", "problem_id", "split", "source", "chosen_run_id", "rejected_run_id")
             .join(texts.rename({"run_id": "chosen_run_id", "plan": "chosen_plan"}), on="chosen_run_id")
             .join(texts.select("run_id", "plan").rename({"run_id": "rejected_run_id", "plan": "rejected_plan"}),
                   on="rejected_run_id")
             .select(PAIR_TEXT_COLUMNS))
    if imported is None:
        return built
    return pl.concat([built, imported.select(PAIR_TEXT_COLUMNS)])
