-- One row per (problem, plan_hash): the run that stands for the plan on each side of each source
-- (lowest run_id), or NULL where the plan never appears on that side. Plan texts are never read here.
-- A run whose label rows disagree counts as unlabeled. Keys and salts follow (problem_id, plan_hash)
-- order, so ties and ranks do not depend on scan order.
CREATE OR REPLACE TEMP TABLE pairs_plans AS
WITH run_labels AS (
    SELECT run_id, bool_and(is_correct) AS is_correct
    FROM labels
    WHERE is_correct IS NOT NULL
    GROUP BY run_id
    HAVING bool_and(is_correct) = bool_or(is_correct)
),
plans AS (
    SELECT r.problem_id, r.plan_hash,
           min(r.run_id) FILTER (WHERE r.policy_kind IN ('specialized', 'checkpoint')) AS specialized_run,
           min(r.run_id) FILTER (WHERE r.policy_kind = 'base') AS base_run,
           min(r.run_id) FILTER (WHERE l.is_correct) AS correct_run,
           min(r.run_id) FILTER (WHERE NOT l.is_correct) AS incorrect_run
    FROM runs r LEFT JOIN run_labels l USING (run_id)
    WHERE r.problem_id IS NOT NULL AND r.run_id IS NOT NULL AND r.plan_hash IS NOT NULL
    GROUP BY r.problem_id, r.plan_hash
)
SELECT *,
       dense_rank() OVER (ORDER BY problem_id) AS problem_key,
       row_number() OVER (ORDER BY problem_id, plan_hash) AS plan_key,
       -- rules.plan_salt: the first 32 bits of md5('<seed>:<plan_hash>')
       ('0x' || left(md5('$seed:' || plan_hash), 8))::UBIGINT AS salt
FROM plans;
