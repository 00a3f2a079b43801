-- The pairs each problem's caps keep, one row each: `place` is its position within its problem and source
-- (1 = the problem's first kept pair), then its sample rank and plan indexes (the parts of its pair key).
SELECT problem_id, 'specialized_over_base' AS source,
       generate_subscripts(specialized_kept, 1) AS place,
       (unnest(specialized_kept) >> 64)::UBIGINT AS sample_rank,
       ((unnest(specialized_kept) >> 32) & 4294967295)::BIGINT AS chosen_index,
       (unnest(specialized_kept) & 4294967295)::BIGINT AS rejected_index
FROM pairs_per_problem
UNION ALL
SELECT problem_id, 'correct_over_incorrect' AS source,
       generate_subscripts(correct_kept, 1) AS place,
       (unnest(correct_kept) >> 64)::UBIGINT AS sample_rank,
       ((unnest(correct_kept) >> 32) & 4294967295)::BIGINT AS chosen_index,
       (unnest(correct_kept) & 4294967295)::BIGINT AS rejected_index
FROM pairs_per_problem;
