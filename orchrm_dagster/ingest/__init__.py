"""Streaming ingestion of run batches: validate every line against the contract, quarantine the bad ones."""

from orchrm_dagster.ingest.batch import default_workers, ingest_batch, ingest_files
from orchrm_dagster.ingest.report import FileReport, IngestReport
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.validate import Rejection, validate_line

__all__ = ["FileReport", "IngestReport", "IngestSettings", "Rejection", "default_workers", "ingest_batch",
           "ingest_files", "validate_line"]
