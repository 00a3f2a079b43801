"""The warehouse file opens in the `duckdb` CLI the package index offers (`pip install duckdb-cli`, 1.5: storage
versions 64-68), not only in the DuckDB 2.0 that writes it."""

import struct
from pathlib import Path

import duckdb

from orchrm_dagster.storage.root import StorageRoot
from orchrm_dagster.storage.warehouse import Warehouse

# What `duckdb-cli` 1.5.6 says of a newer file: "we can only read versions between 64 and 68"
CLI_READABLE = range(64, 69)


def storage_version(path: str) -> int:
    """The storage version number in a DuckDB file's header: 'DUCK' at byte 8, then a little-endian uint64."""
    header = Path(path).read_bytes()[:20]
    assert header[8:12] == b"DUCK", header
    return struct.unpack("<Q", header[12:20])[0]


def test_the_warehouse_is_written_in_a_storage_version_the_released_cli_reads(storage_root: StorageRoot):
    warehouse = Warehouse(storage_root)
    warehouse.refresh_views()

    assert storage_version(warehouse.path) in CLI_READABLE
    assert warehouse.query("select count(*) as n from runs").column("n").to_pylist() == [0]


def test_a_warehouse_file_in_a_newer_format_is_replaced_by_the_next_refresh(storage_root: StorageRoot):
    warehouse = Warehouse(storage_root)
    Path(warehouse.path).parent.mkdir(parents=True, exist_ok=True)
    duckdb.connect(warehouse.path).close()  # DuckDB 2.0's own format
    assert storage_version(warehouse.path) not in CLI_READABLE

    warehouse.refresh_views()

    assert storage_version(warehouse.path) in CLI_READABLE
