"""Streaming ingestion of run batches: validate every line against the contract, quarantine the bad ones."""

from orchrm_dagster.ingest.batch import FileReport, IngestReport, default_workers, ingest_batch, ingest_files
from orchrm_dagster.ingest.landing import advance_cursor, new_or_changed, not_yet_ingested, parse_cursor
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.validate import Rejection, validate_line

__all__ = ["FileReport", "IngestReport", "IngestSettings", "Rejection", "advance_cursor", "default_workers",
           "ingest_batch", "ingest_files", "new_or_changed", "not_yet_ingested", "parse_cursor", "validate_line"]
