"""One (benchmark, policy) partition end to end on a storage root: sample, execute, land, resume."""

import orjson

from orchrm_dagster.orchestration import (Cell, ExecutionSettings, PlanSamplingSettings, PolicySpec, execute_and_land,
                                          read_samples, sample_partition)

from .test_sampling_and_execution import ScriptedBackend

KEY = Cell("gsm8k", "p")


def test_sampling_keeps_what_was_drawn_and_drops_what_is_no_longer_asked(storage_root):
    policy = PolicySpec(name="p")
    first = sample_partition(storage_root, "gsm8k", policy, ScriptedBackend(), PlanSamplingSettings(2, 2))
    assert first.new_samples == 4 and first.parse_rate == 1.0
    backend = ScriptedBackend()
    more = sample_partition(storage_root, "gsm8k", policy, backend, PlanSamplingSettings(3, 2))
    assert more.new_samples == 2 and len(backend.requests) == 2 and len(read_samples(storage_root, KEY)) == 6
    fewer = sample_partition(storage_root, "gsm8k", policy, ScriptedBackend(), PlanSamplingSettings(1, 1))
    assert fewer.new_samples == 0 and len(read_samples(storage_root, KEY)) == 1


def test_execute_and_land_lands_one_batch_and_a_second_call_redoes_nothing(storage_root):
    sample_partition(storage_root, "gsm8k", PolicySpec(name="p"), ScriptedBackend(), PlanSamplingSettings(2, 2))
    report, landed = execute_and_land(storage_root, KEY, ScriptedBackend, ExecutionSettings(concurrent_plans=2))
    assert (report.executed, report.resumed, landed.name) == (4, 0, "mas-gsm8k_p.jsonl")
    lines = storage_root.fs.cat_file(landed.path).splitlines()
    assert len(lines) == 4 and all(orjson.loads(line)["final_answer"] for line in lines)
    assert not list((storage_root.fs.ls(storage_root.path("work", "execution"))))  # the partial is gone

    again, landed_again = execute_and_land(storage_root, KEY, ScriptedBackend, ExecutionSettings())
    assert (again.executed, again.resumed) == (0, 4)
    assert storage_root.fs.cat_file(landed_again.path).splitlines() == lines
