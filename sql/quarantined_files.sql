-- One row per landed file with quarantined lines: how many, and its first bad line's reason (file:line: why).
SELECT source_file, batch_id, count(*) AS quarantined, arg_min(reason, line_number) AS first_reason
FROM quarantine
GROUP BY ALL
ORDER BY quarantined DESC, source_file;
