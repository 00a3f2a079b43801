"""The storage unit's config: where the Parquet tables, checkpoints and the DuckDB warehouse live."""

from __future__ import annotations

import os

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.storage.root import StorageRoot
from orchrm_dagster.storage.warehouse import Warehouse


@engine_config
class StorageSettings:
    root: str = Field(default="storage", description="Local folder or s3://bucket/prefix")
    s3_endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (MinIO, moto, ...)")
    warehouse_path: str | None = Field(
        default=None, description="DuckDB file; default <root>/warehouse.duckdb for a local root")

    def storage_root(self) -> StorageRoot:
        return StorageRoot(self.root, self.s3_endpoint_url)

    def warehouse(self) -> Warehouse:
        return Warehouse(self.storage_root(), self.warehouse_path)


def storage_settings() -> StorageSettings:
    """The storage settings in effect, read without the rest of the settings file: its `storage` section (the
    defaults where there is none), or the root ORCHRM_STORAGE (`orchrm --storage`) names, alone."""
    from orchrm_dagster.settings_file import read_settings_file, validated

    named = os.environ.get("ORCHRM_STORAGE")
    if named:  # another root: the file's warehouse file and endpoint belong to the file's root, not to this one
        return StorageSettings(root=named)
    file = read_settings_file()
    return validated(StorageSettings, file.section("storage"), file, ("storage",))


def default_storage_url() -> str:
    """The storage root in effect: ORCHRM_STORAGE (`orchrm --storage`), else the settings file's `storage.root`,
    else ./storage."""
    return storage_settings().root
