"""How `orchrm serve` runs: where it listens, how it batches, what it accepts (an engine config: `orchrm serve`'s
flags are generated from its fields)."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.rm import ScoringSettings


@engine_config
class ServeSettings:
    host: str = Field(default="127.0.0.1", description="Address to listen on (0.0.0.0: every one); any but loopback "
                                                       "(127.0.0.0/8, ::1, localhost) needs a token")
    token_file: str | None = Field(default=None, description="A file holding the bearer token every request but "
                                   "GET /v1/health must send (`Authorization: Bearer <token>`); the ORCHRM_SERVE_TOKEN "
                                   "environment variable wins over it. Relative to the settings file's folder; no "
                                   "flag (a flag shows in `ps`)")
    port: int = Field(default=8000, description="Port to listen on")
    max_batch_plans: int = Field(default=64, description="Plans scored in one forward batch at most (concurrent "
                                                         "requests share a batch; a larger request is scored alone)")
    max_wait_ms: float = Field(default=5.0, description="How long a request waits for others to join its batch")
    poll_seconds: float = Field(default=2.0, description="How often the champion pointer is checked; a new champion "
                                                         "is loaded without a restart")
    max_plans: int = Field(default=64, description="Plans per request")
    max_text_chars: int = Field(default=100_000, description="Characters per question and per plan")
    max_body_bytes: int = Field(default=4 * 1024 * 1024, description="Bytes of a request body")
    scoring: ScoringSettings = Field(default_factory=ScoringSettings, description="How the champion scores plans")

    def __post_init__(self):
        for name in ("max_batch_plans", "max_plans", "max_text_chars", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.poll_seconds <= 0:
            raise ValueError("max_wait_ms must be >= 0 and poll_seconds > 0")
