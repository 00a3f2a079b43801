COPY (
    SELECT r.* FROM read_parquet($staged_runs, union_by_name = true) r
    SEMI JOIN (SELECT source_file, line_number FROM line_fate WHERE keep) k USING (source_file, line_number)
) TO $out (FORMAT parquet, COMPRESSION zstd);
