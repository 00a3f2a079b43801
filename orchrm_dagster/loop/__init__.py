"""The loop that keeps learning, apart from Dagster: its state, its settings, and the one function that decides
what happens next (the daemon's sensors and `orchrm loop` both call it)."""

from orchrm_dagster.loop.batching import BatchingSettings, Cut, cut_batches
from orchrm_dagster.loop.decide import (LEARNING, ROUNDS, BatchState, Decision, Step, StepKind, batch_states, decide,
                                        describe, ingest_step, unclean_batch_states)
from orchrm_dagster.loop.read import batch_from_view, read_state, rounds
from orchrm_dagster.loop.report import Late, LoopReport, loop_report
from orchrm_dagster.loop.settings import LoopSettings
from orchrm_dagster.loop.state import Batch, LoopState, Round, StepRuns

__all__ = ["Late", "LoopReport", "loop_report", "Batch", "BatchState", "BatchingSettings", "Cut", "Decision", "LEARNING", "LoopSettings", "LoopState",
           "ROUNDS", "Round", "Step", "StepKind", "StepRuns", "batch_from_view", "batch_states", "cut_batches",
           "decide", "describe", "ingest_step", "read_state", "rounds", "unclean_batch_states"]
