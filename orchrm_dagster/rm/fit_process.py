"""One of a reward-model training's data-parallel processes, started by `accelerate launch` (`rm.train.
fit_data_parallel`): `python -m orchrm_dagster.rm.fit_process <job folder>`. It reads the job (settings, the trainer
checkpoint to resume from) and the pairs beside it, and trains its share of each step; the first process saves the
model and reports what the training did (`processes.data_parallel_process`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path


def fit_share(job: dict, folder: Path) -> dict:
    import pyarrow.parquet as pq

    from orchrm_dagster.engine_config import config_from_json
    from orchrm_dagster.rm.config import RMTrainConfig
    from orchrm_dagster.rm.data import PairTexts
    from orchrm_dagster.rm.train import PAIRS_FILE, fit, torch_threads

    config = config_from_json(RMTrainConfig, job["config"])
    train = PairTexts(**{name: [str(v) for v in column]
                         for name, column in pq.read_table(folder / PAIRS_FILE).to_pydict().items()})
    with torch_threads(config.num_threads):
        return dataclasses.asdict(fit(train, config, job["output_dir"], job["device"], job["checkpoint"]))


if __name__ == "__main__":
    from orchrm_dagster.processes import data_parallel_process

    data_parallel_process(fit_share)
