-- A batch of one file stages its calls as the table holds them (a line is its line_number); a batch of several
-- stages each call with its run's source_file as well, which the table does not hold.
COPY (
    SELECT c.* $drop_key FROM read_parquet($staged_calls, union_by_name = true) c
    SEMI JOIN (SELECT $call_key FROM line_fate WHERE keep) k USING ($call_key)
) TO $out (FORMAT parquet, COMPRESSION zstd);
