"""Dagster resources: where the data lives. Defaults run on the embedded setup (a local folder)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from orchrm_dagster.storage.root import StorageRoot, default_storage_url
from orchrm_dagster.storage.warehouse import Warehouse


class StorageResource(dg.ConfigurableResource):
    """The storage root: a local folder (default `storage/`, or ORCHRM_STORAGE) or `s3://bucket/prefix`."""

    root: str = Field(default="storage", description="Local folder or s3://bucket/prefix")
    s3_endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (MinIO, moto, ...)")
    warehouse_path: str | None = Field(
        default=None, description="DuckDB file; default <root>/warehouse.duckdb for a local root"
    )

    def storage_root(self) -> StorageRoot:
        return StorageRoot(self.root, self.s3_endpoint_url)

    def warehouse(self) -> Warehouse:
        return Warehouse(self.storage_root(), self.warehouse_path)


def default_storage_resource() -> StorageResource:
    return StorageResource(root=default_storage_url())
