COPY (
    SELECT c.* FROM read_parquet($staged_calls) c
    SEMI JOIN (SELECT line_number FROM line_fate WHERE keep) k USING (line_number)
) TO $out (FORMAT parquet, COMPRESSION zstd);
