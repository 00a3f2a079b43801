"""The ingestion unit's config: what a line may hold before it is quarantined, and how Parquet is written."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.traces import TraceSettings


@engine_config
class IngestSettings:
    max_record_bytes: int = Field(default=16 << 20, description="Longer lines are quarantined")
    max_field_chars: int = Field(default=1 << 20, description="Longer text fields are quarantined")
    max_raw_chars: int = Field(default=64 << 10, description="How much of a bad line quarantine keeps")
    rows_per_group: int = Field(default=20_000, description="Parquet row-group size while streaming")
    traces: TraceSettings = Field(default_factory=TraceSettings,
                                  description="How trace files (orchrm import-traces, or landed as x.otlp.json, "
                                              "x.langfuse.json, x.langsmith.json) become run records")
