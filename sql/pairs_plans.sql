-- One row per (problem, environment, plan_hash): the run that stands for the plan on each side of each source
-- (lowest run_id), or NULL where the plan never appears on that side. Plan texts are never read here. Pairs are
-- formed within a problem and an environment: the two runs of a pair were executed the same way.
-- Which runs stand on the specialized and base sides is decided per policy by pairs.policy_side (the relation
-- `policy_sides`: policy_kind, policy_name, specialized, base); no kind is named here.
-- A run whose label rows disagree counts as unlabeled. A run that failed for a cause outside its plan (a label row
-- without a verdict: an endpoint, a sub-agent, the time budget) stands on no side: it says nothing of its plan. plan_index numbers a problem's plans in (environment,
-- plan_hash) order (so ties never depend on scan order; with one environment, plan_hash order), so it names one
-- environment's plan within the problem; salt is rules.plan_salt.
CREATE OR REPLACE TEMP TABLE pairs_plans AS
WITH run_labels AS (
    SELECT run_id, bool_and(is_correct) AS is_correct
    FROM labels
    WHERE is_correct IS NOT NULL
    GROUP BY run_id
    HAVING bool_and(is_correct) = bool_or(is_correct)
),
failed_runs AS (
    SELECT DISTINCT run_id FROM labels WHERE is_correct IS NULL
),
plans AS (
    SELECT r.problem_id, coalesce(r.environment, $default_environment) AS environment, r.plan_hash,
           min(r.run_id) FILTER (WHERE s.specialized) AS specialized_run,
           min(r.run_id) FILTER (WHERE s.base) AS base_run,
           min(r.run_id) FILTER (WHERE l.is_correct) AS correct_run,
           min(r.run_id) FILTER (WHERE NOT l.is_correct) AS incorrect_run
    FROM runs r
    LEFT JOIN run_labels l USING (run_id)
    LEFT JOIN policy_sides s
      ON s.policy_kind IS NOT DISTINCT FROM r.policy_kind AND s.policy_name IS NOT DISTINCT FROM r.policy_name
    ANTI JOIN failed_runs f ON f.run_id = r.run_id
    WHERE r.problem_id IS NOT NULL AND r.run_id IS NOT NULL AND r.plan_hash IS NOT NULL
    GROUP BY 1, 2, 3
)
SELECT *,
       row_number() OVER (PARTITION BY problem_id ORDER BY environment, plan_hash) AS plan_index,
       (xor(('0x' || left(plan_hash, 8))::UBIGINT, $seed_mask) * 2654435761) % 4294967296 AS salt
FROM plans;
