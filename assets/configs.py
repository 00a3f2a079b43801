"""Run config of the assets, with defaults that run on the embedded setup."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from orchrm_dagster.ingest.validate import Limits
from orchrm_dagster.labels.batch import LabelSettings


class IngestConfig(dg.Config):
    max_record_bytes: int = Field(default=Limits.max_record_bytes, description="Longer lines are quarantined")
    max_field_chars: int = Field(default=Limits.max_field_chars, description="Longer text fields are quarantined")
    max_raw_chars: int = Field(default=Limits.max_raw_chars, description="How much of a bad line quarantine keeps")
    rows_per_group: int = Field(default=20_000, description="Parquet row-group size while streaming")

    def limits(self) -> Limits:
        return Limits(self.max_record_bytes, self.max_field_chars, self.max_raw_chars)


class LabelConfig(dg.Config):
    qa_f1_threshold: float | None = Field(
        default=None, description="Short-answer QA counts as correct at this token F1; unset = exact match only"
    )
    answer_types: dict[str, str] = Field(
        default_factory=dict, description="benchmark -> math | qa | choice, overriding the built-in mapping"
    )

    def settings(self) -> LabelSettings:
        return LabelSettings(self.qa_f1_threshold, dict(self.answer_types))


class ProblemsConfig(dg.Config):
    extra_files: list[str] = Field(
        default_factory=list, description="More problem files (JSONL, the shipped benchmarks' schema)"
    )


class QuarantineCheckConfig(dg.Config):
    warn_rate: float = Field(default=0.05, description="Warn when a batch quarantines more than this share of lines")
