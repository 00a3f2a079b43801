-- Rejected lines plus valid lines whose run_id was already taken (earlier in the file, or by another batch).
COPY (
    SELECT * FROM (
        SELECT * FROM read_parquet($staged_quarantine)
        UNION ALL
        SELECT r.batch_id, r.source_file, r.line_number, r.run_id, 'run_id' AS field,
               CASE WHEN f.line_number <> f.first_line THEN $duplicate_in_file ELSE $already_ingested END AS kind,
               r.source_file || ':' || r.line_number || ': ' || CASE WHEN f.line_number <> f.first_line
                    THEN 'duplicate run_id ' || r.run_id || ': first seen on line ' || f.first_line || ' of this file'
                    ELSE 'run_id ' || r.run_id || ' was already ingested in batch ' || f.prior_batch || '; this copy is not counted twice'
               END AS reason,
               left(to_json(r)::VARCHAR, $max_raw_chars) AS raw,
               length(to_json(r)::VARCHAR) > $max_raw_chars AS raw_truncated
        FROM read_parquet($staged_runs) r
        JOIN line_fate f USING (line_number)
        WHERE NOT f.keep
    ) ORDER BY line_number
) TO $out (FORMAT parquet, COMPRESSION zstd);
