SELECT (SELECT count(*) FROM quarantine WHERE batch_id = $batch_id) AS quarantined,
       (SELECT count(*) FROM runs WHERE batch_id = $batch_id) AS landed;
