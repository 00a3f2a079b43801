-- The mix, then the pairs file. A source cut by the mix keeps its pairs in order of their place within their
-- problem (every problem's first pair before any problem's second), so it still spans its problems: places
-- before the boundary place are kept whole, and at the boundary the pairs with the lowest keys are kept.
-- Row order is unspecified.
COPY (
    WITH capped AS (
        SELECT problem_id, 'specialized_over_base' AS source,
               unnest(specialized_kept) AS pair_key, generate_subscripts(specialized_kept, 1) AS place
        FROM pairs_per_problem
        UNION ALL
        SELECT problem_id, 'correct_over_incorrect' AS source,
               unnest(correct_kept) AS pair_key, generate_subscripts(correct_kept, 1) AS place
        FROM pairs_per_problem
    ),
    before_boundary AS (
        SELECT problem_id, source, pair_key FROM capped
        WHERE place < CASE source WHEN 'specialized_over_base' THEN $specialized_boundary ELSE $correct_boundary END
    ),
    at_boundary AS (
        SELECT problem_id, source, pair_key FROM capped
        WHERE place = CASE source WHEN 'specialized_over_base' THEN $specialized_boundary ELSE $correct_boundary END
        QUALIFY row_number() OVER (PARTITION BY source ORDER BY pair_key, problem_id)
                <= CASE source WHEN 'specialized_over_base' THEN $specialized_at_boundary ELSE $correct_at_boundary END
    ),
    mixed AS (
        SELECT problem_id, source,
               ((pair_key >> 32) & 4294967295)::BIGINT AS chosen_index,
               (pair_key & 4294967295)::BIGINT AS rejected_index
        FROM (SELECT * FROM before_boundary UNION ALL SELECT * FROM at_boundary)
    ),
    splits AS (
        SELECT problem_id,
               CASE WHEN ('0x' || left(md5(problem_id), 8))::UBIGINT % 10000 < $validation_cutoff
                    THEN 'validation' ELSE 'train' END AS split
        FROM (SELECT DISTINCT problem_id FROM mixed)
    )
    SELECT md5(c.plan_hash || ':' || r.plan_hash || ':' || m.problem_id) AS pair_id,
           m.problem_id,
           CASE m.source WHEN 'specialized_over_base' THEN c.specialized_run ELSE c.correct_run END AS chosen_run_id,
           CASE m.source WHEN 'specialized_over_base' THEN r.base_run ELSE r.incorrect_run END AS rejected_run_id,
           c.plan_hash AS chosen_plan_hash,
           r.plan_hash AS rejected_plan_hash,
           m.source,
           s.split
    FROM mixed m
    JOIN pairs_plans c ON c.problem_id = m.problem_id AND c.plan_index = m.chosen_index
    JOIN pairs_plans r ON r.problem_id = m.problem_id AND r.plan_index = m.rejected_index
    JOIN splits s ON s.problem_id = m.problem_id
) TO $out (FORMAT parquet, COMPRESSION zstd);
