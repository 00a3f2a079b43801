-- One warehouse view over a table's Parquet files (all batches, listed). Rebuilt after every write. The empty,
-- typed select of the contract's columns gives a file written before a column existed that column as NULL;
-- $defaults (contract.COLUMN_DEFAULTS, possibly empty) replaces such NULLs where the column has a default.
CREATE OR REPLACE VIEW $view AS
SELECT * $defaults FROM (
    SELECT * FROM read_parquet($files, union_by_name = true, hive_partitioning = false)
    UNION ALL BY NAME
    SELECT $typed_nulls WHERE false
);
