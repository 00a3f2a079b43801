-- Pairs that repeat a (problem, chosen plan, rejected plan) within one environment (the same plans may pair in two:
-- each environment's runs pair among themselves), or a pair_id.
SELECT (SELECT count(*) - count(DISTINCT (p.problem_id, p.chosen_plan_hash, p.rejected_plan_hash, r.environment))
        FROM pairs p LEFT JOIN runs r ON r.run_id = p.chosen_run_id) AS repeated_plan_pairs,
       (SELECT count(*) - count(DISTINCT pair_id) FROM pairs) AS repeated_pair_ids,
       (SELECT count(*) FROM pairs WHERE chosen_plan_hash = rejected_plan_hash) AS identical_plan_pairs;
