"""The loop that keeps learning, apart from Dagster: its state, its settings, and the one function that decides
what happens next (the daemon's sensors and `orchrm loop` both call it).

Names load lazily (`orchrm_dagster.lazy_names`)."""

from __future__ import annotations

from orchrm_dagster.lazy_names import lazy_names

# a name that is also its module's: the submodule, once imported, would shadow the lazy name on the package
from orchrm_dagster.loop.decide import decide

_EXPORTS = {
    "BatchingSettings": "batching",
    "Cut": "batching",
    "cut_batches": "batching",
    "LEARNING": "decide",
    "ROUNDS": "decide",
    "BatchState": "decide",
    "Decision": "decide",
    "Step": "decide",
    "StepKind": "decide",
    "batch_states": "decide",
    "describe": "decide",
    "ingest_step": "decide",
    "unclean_batch_states": "decide",
    "batch_from_view": "read",
    "read_state": "read",
    "rounds": "read",
    "Late": "report",
    "LoopReport": "report",
    "loop_report": "report",
    "LoopSettings": "settings",
    "Batch": "state",
    "LoopState": "state",
    "Round": "state",
    "StepRuns": "state",
}
__getattr__, __dir__, __all__ = lazy_names(__name__, _EXPORTS, eager=("decide",))
