SELECT coalesce(sum(specialized_candidates), 0) AS specialized_candidates,
       coalesce(sum(correct_candidates), 0) AS correct_candidates,
       coalesce(sum(conflicts), 0) AS conflicts,
       coalesce(sum(len(specialized_kept)), 0) AS specialized_after_caps,
       coalesce(sum(len(correct_kept)), 0) AS correct_after_caps
FROM pairs_per_problem;
