-- Per problem: its candidate pairs of each source, its conflicts, and the pairs its caps keep. A candidate pairs
-- two plans of one environment (the caps count a problem's pairs of every environment together).
-- A candidate is an ordered pair of two different plans where the first beats the second in some source;
-- a conflict is a candidate whose second plan also beats the first (in either source): all such are dropped.
-- A candidate that qualifies for both sources counts as correct_over_incorrect only, so no preference is
-- written twice and pair_id stays unique.
-- Candidates grow with the square of a problem's plans, so they are never stored: they stream into a
-- per-problem aggregate that keeps the `cap` smallest pair keys of each source. A pair key holds the sample
-- rank (rules.sample_rank) in its high 64 bits and the two plan indexes below: unique within a problem,
-- ordered by rank, then chosen and rejected plan_hash.
CREATE OR REPLACE TEMP TABLE pairs_per_problem AS
WITH sides AS (
    SELECT problem_id, environment, plan_index, salt,
           specialized_run IS NOT NULL AS specialized, base_run IS NOT NULL AS base,
           correct_run IS NOT NULL AS correct, incorrect_run IS NOT NULL AS incorrect
    FROM pairs_plans
),
candidates AS (
    SELECT w.problem_id, w.plan_index AS chosen_index, l.plan_index AS rejected_index,
           w.specialized AND l.base AS specialized_over_base,
           w.correct AND l.incorrect AS correct_over_incorrect,
           (l.specialized AND w.base) OR (l.correct AND w.incorrect) AS conflict,
           xor(w.salt, l.salt * 2246822507 % 4294967296) AS mixed
    FROM (SELECT * FROM sides WHERE specialized OR correct) w
    JOIN (SELECT * FROM sides WHERE base OR incorrect) l
      ON w.problem_id = l.problem_id AND w.environment = l.environment AND w.plan_index <> l.plan_index
    WHERE (w.specialized AND l.base) OR (w.correct AND l.incorrect)
),
keyed AS (
    SELECT problem_id, conflict, chosen_index < rejected_index AS first_of_two,
           specialized_over_base AND NOT correct_over_incorrect AND NOT conflict AS specialized_over_base,
           correct_over_incorrect AND NOT conflict AS correct_over_incorrect,
           ((mixed * 3266489917 % 4294967296)::UHUGEINT << 64)
           | (chosen_index::UHUGEINT << 32) | rejected_index::UHUGEINT AS pair_key
    FROM candidates
)
SELECT problem_id,
       count(*) FILTER (WHERE specialized_over_base) AS specialized_candidates,
       count(*) FILTER (WHERE correct_over_incorrect) AS correct_candidates,
       count(*) FILTER (WHERE conflict AND first_of_two) AS conflicts,
       min(pair_key, $specialized_cap) FILTER (WHERE specialized_over_base) AS specialized_kept,
       min(pair_key, $correct_cap) FILTER (WHERE correct_over_incorrect) AS correct_kept
FROM keyed
GROUP BY problem_id;
