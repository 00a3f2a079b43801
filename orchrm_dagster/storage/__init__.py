"""Where the data lives: the storage root (local folder or S3), Parquet writing, DuckDB and Polars access."""

from orchrm_dagster.storage.batch_index import BatchIndex, no_cycle_collection, publish_batch, read_index, record_ingest
from orchrm_dagster.storage.batches import (BatchFile, BatchView, LandingView, NewBatch, batch_holding, batch_members,
                                            batch_name, files_fingerprint, ingested_state, land, landing_view,
                                            register_batches)
from orchrm_dagster.storage.checkpoints import (MANIFEST, MODEL_SUBDIR, CheckpointStore, finished_manifests,
                                                folder_name, folder_numbers, read_manifest, write_manifest)
from orchrm_dagster.storage.duck import bulk_settings, duckdb_settings
from orchrm_dagster.storage.locks import LockTimeout, root_lock
from orchrm_dagster.storage.root import (LANDING_SUFFIXES, LandedFile, StorageRoot, batch_id_for,
                                         local_work_dir, root_cache_dir, safe_name,
                                         written_whole)
from orchrm_dagster.storage.settings import StorageSettings, default_storage_url, storage_settings
from orchrm_dagster.storage.space import DiskFull, full_disk_errno, writing
from orchrm_dagster.storage.unreachable import StoreUnreachable
from orchrm_dagster.storage.warehouse import NotAReadStatement, Warehouse, WarehouseBusy, check_read_only

# Polars, pandas and pyarrow.dataset come with these (about 0.5 s): imported on first use, so a command that only
# reads the warehouse (`orchrm query`, `orchrm status`) answers in well under a second.
_LAZY = {"scan_files": "frames", "scan_table": "frames", "table_files": "frames", "ParquetSink": "parquet"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"orchrm_dagster.storage.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BatchFile", "BatchView", "CheckpointStore", "DiskFull", "LANDING_SUFFIXES", "LandedFile", "LandingView", "LockTimeout",
    "MANIFEST", "MODEL_SUBDIR", "NewBatch", "NotAReadStatement", "ParquetSink", "StorageRoot", "StorageSettings",
    "Warehouse", "WarehouseBusy", "batch_holding", "batch_id_for", "batch_members", "batch_name", "bulk_settings",
    "check_read_only", "default_storage_url", "storage_settings", "duckdb_settings", "files_fingerprint", "finished_manifests",
    "folder_name", "folder_numbers", "full_disk_errno", "ingested_state", "land", "landing_view", "local_work_dir",
    "BatchIndex", "no_cycle_collection", "publish_batch", "read_index", "read_manifest", "record_ingest", "register_batches",
    "root_cache_dir", "root_lock", "safe_name", "scan_files", "scan_table", "table_files", "write_manifest",
    "StoreUnreachable", "writing", "written_whole",
]
