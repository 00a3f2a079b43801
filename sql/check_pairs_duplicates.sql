-- Pairs that repeat a (problem, chosen plan, rejected plan) or a pair_id.
SELECT (SELECT count(*) - count(DISTINCT (problem_id, chosen_plan_hash, rejected_plan_hash)) FROM pairs) AS repeated_plan_pairs,
       (SELECT count(*) - count(DISTINCT pair_id) FROM pairs) AS repeated_pair_ids,
       (SELECT count(*) FROM pairs WHERE chosen_plan_hash = rejected_plan_hash) AS identical_plan_pairs;
