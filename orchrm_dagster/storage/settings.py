"""The storage unit's config: where the Parquet tables, checkpoints and the DuckDB warehouse live."""

from __future__ import annotations

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
