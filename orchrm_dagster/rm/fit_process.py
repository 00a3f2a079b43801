"""One of a reward-model training's data-parallel processes, started by `accelerate launch` (`rm.train.
fit_data_parallel`): `python -m orchrm_dagster.rm.fit_process <job folder>`. It reads the job (settings, pairs, the
trainer checkpoint to resume from), trains its share of each step, and the first process saves the model and writes
what the training did; a process that fails writes its error for the launcher to report. It dies with its owners."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    from orchrm_dagster.processes import watch_owners, write_error

    watch_owners()
    from accelerate import PartialState

    PartialState()  # joins the process group and takes this process's own device before anything loads
    job_dir = (argv if argv is not None else sys.argv[1:])[0]
    rank = int(os.environ.get("RANK", "0"))
    try:
        _fit(Path(job_dir), rank)
    except BaseException as error:
        write_error(job_dir, rank, error)
        raise
    finally:
        import torch.distributed as dist

        if dist.is_initialized():  # gloo aborts the process at exit otherwise
            dist.destroy_process_group()


def _fit(job: Path, rank: int) -> None:
    import dataclasses

    import pyarrow.parquet as pq

    from orchrm_dagster.engine_config import config_from_json
    from orchrm_dagster.rm.config import RMTrainConfig
    from orchrm_dagster.rm.data import PairTexts
    from orchrm_dagster.rm.train import FITTED_FILE, torch_threads, fit

    spec = json.loads((job / "job.json").read_text())
    config = config_from_json(RMTrainConfig, spec["config"])
    train = PairTexts(**{name: [str(v) for v in column] for name, column in
                         pq.read_table(job / "train.parquet").to_pydict().items()})
    with torch_threads(config.num_threads):
        fitted = fit(train, config, spec["output_dir"], spec["device"], spec["checkpoint"])
    if rank == 0:
        (job / FITTED_FILE).write_text(json.dumps(dataclasses.asdict(fitted)))


if __name__ == "__main__":
    main()
