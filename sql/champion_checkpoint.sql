-- Every champion: a version champion of at least one domain, with its accuracy on each domain's validation pairs.
SELECT version, champion_of, val_accuracy, val_accuracy_by_domain, n_validation_pairs
FROM rm_checkpoints WHERE is_champion ORDER BY version;
