SELECT count(*) AS runs FROM runs WHERE policy_name = $policy;
