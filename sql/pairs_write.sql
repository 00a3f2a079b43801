-- The mix, then the pairs file. The mix keeps each source's pairs in order of their place within their
-- problem (every problem's first pair before any problem's second), so a cut source still spans its problems.
COPY (
    WITH mixed AS (
        SELECT * FROM pairs_capped
        QUALIFY row_number() OVER (PARTITION BY source
                                   ORDER BY problem_rank, sample_rank, problem_key, chosen_key, rejected_key)
                <= CASE source WHEN 'specialized_over_base' THEN $specialized_quota ELSE $correct_quota END
    )
    SELECT md5(c.plan_hash || ':' || r.plan_hash || ':' || c.problem_id) AS pair_id,
           c.problem_id,
           CASE m.source WHEN 'specialized_over_base' THEN c.specialized_run ELSE c.correct_run END AS chosen_run_id,
           CASE m.source WHEN 'specialized_over_base' THEN r.base_run ELSE r.incorrect_run END AS rejected_run_id,
           c.plan_hash AS chosen_plan_hash,
           r.plan_hash AS rejected_plan_hash,
           m.source,
           CASE WHEN ('0x' || left(md5(c.problem_id), 8))::UBIGINT % 10000 < $validation_cutoff
                THEN 'validation' ELSE 'train' END AS split
    FROM mixed m
    JOIN pairs_plans c ON c.plan_key = m.chosen_key
    JOIN pairs_plans r ON r.plan_key = m.rejected_key
    ORDER BY c.problem_id, m.source, pair_id
) TO $out (FORMAT parquet, COMPRESSION zstd);
