"""How `orchrm serve` runs: where it listens, how it batches, what it accepts.

A plain frozen dataclass, not an `engine_config`: the service is started from the CLI, never from a Dagster run, so
there is no launchpad to show it on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchrm_dagster.rm import ScoringSettings


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch_plans: int = 64  # (question, plan) inputs scored together at most; a larger request is scored alone
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for others to join it
    poll_seconds: float = 2.0  # how often the champion pointer is checked for a new champion
    max_plans: int = 64  # plans per request
    max_text_chars: int = 100_000  # characters per question and per plan
    max_body_bytes: int = 4 * 1024 * 1024
    scoring: ScoringSettings = field(default_factory=ScoringSettings)

    def __post_init__(self):
        for name in ("max_batch_plans", "max_plans", "max_text_chars", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.poll_seconds <= 0:
            raise ValueError("max_wait_ms must be >= 0 and poll_seconds > 0")
