-- The per-problem caps: each problem keeps its lowest-ranked pairs of each source.
-- sample_rank is rules.sample_rank; problem_rank is the pair's place within its problem and source.
CREATE OR REPLACE TEMP TABLE pairs_capped AS
WITH by_source AS (
    SELECT problem_key, chosen_key, rejected_key, chosen_salt, rejected_salt,
           'specialized_over_base' AS source, 0::UBIGINT AS source_salt
    FROM pairs_candidates WHERE specialized_over_base AND NOT conflict
    UNION ALL
    SELECT problem_key, chosen_key, rejected_key, chosen_salt, rejected_salt,
           'correct_over_incorrect' AS source, 1540483477::UBIGINT AS source_salt
    FROM pairs_candidates WHERE correct_over_incorrect AND NOT conflict
),
ranked AS (
    SELECT problem_key, chosen_key, rejected_key, source,
           (xor(xor((chosen_salt * 2654435761) % 4294967296, rejected_salt), source_salt)
            * 2246822507) % 4294967296 AS sample_rank
    FROM by_source
)
SELECT *,
       row_number() OVER (PARTITION BY problem_key, source
                          ORDER BY sample_rank, chosen_key, rejected_key) AS problem_rank
FROM ranked
QUALIFY problem_rank <= CASE source WHEN 'specialized_over_base' THEN $specialized_cap ELSE $correct_cap END;
