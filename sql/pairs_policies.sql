-- Each policy of the runs (kind and name) with its runs: pairs.policy_side decides which side of
-- specialized-over-base pairs its runs stand on.
SELECT policy_kind, policy_name, count(*) AS runs
FROM runs
WHERE problem_id IS NOT NULL AND run_id IS NOT NULL AND plan_hash IS NOT NULL
GROUP BY ALL
ORDER BY ALL;
