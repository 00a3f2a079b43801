SELECT version, val_accuracy, n_validation_pairs FROM rm_checkpoints WHERE is_champion;
