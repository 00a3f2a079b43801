-- The pairs file from the pairs the mix kept (`mixed`: problem_id, source, chosen_index, rejected_index): run ids,
-- plan hashes and the environment from pairs_plans, and the split by problem. A pair's id names its environment
-- unless it is the default one (rules.pair_id). Row order is unspecified.
COPY (
    WITH splits AS (
        SELECT problem_id,
               CASE WHEN ('0x' || left(md5(problem_id), 8))::UBIGINT % 10000 < $validation_cutoff
                    THEN 'validation' ELSE 'train' END AS split
        FROM (SELECT DISTINCT problem_id FROM mixed)
    )
    SELECT md5(c.plan_hash || ':' || r.plan_hash || ':' || m.problem_id
               || CASE WHEN c.environment = $default_environment THEN '' ELSE ':' || c.environment END) AS pair_id,
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
