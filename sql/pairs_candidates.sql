-- Every ordered pair of two different plans of a problem where the first beats the second in some source.
-- `conflict`: the second also beats the first (in the same or the other source); such pairs are dropped.
-- Integer keys and salts only, so the quadratic part of the build stays narrow.
CREATE OR REPLACE TEMP TABLE pairs_candidates AS
WITH sides AS (
    SELECT problem_key, plan_key, salt,
           specialized_run IS NOT NULL AS specialized, base_run IS NOT NULL AS base,
           correct_run IS NOT NULL AS correct, incorrect_run IS NOT NULL AS incorrect
    FROM pairs_plans
)
SELECT w.problem_key, w.plan_key AS chosen_key, l.plan_key AS rejected_key,
       w.salt AS chosen_salt, l.salt AS rejected_salt,
       w.specialized AND l.base AS specialized_over_base,
       w.correct AND l.incorrect AS correct_over_incorrect,
       (l.specialized AND w.base) OR (l.correct AND w.incorrect) AS conflict
FROM sides w JOIN sides l ON w.problem_key = l.problem_key AND w.plan_key <> l.plan_key
WHERE (w.specialized AND l.base) OR (w.correct AND l.incorrect);
