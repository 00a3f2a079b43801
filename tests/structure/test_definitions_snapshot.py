"""The code location's shape, compared to a checked-in snapshot so that any change to the asset graph is a visible
diff. After an intended change: ORCHRM_UPDATE_SNAPSHOTS=1 pytest tests/structure/test_definitions_snapshot.py"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg

from orchrm_dagster.definitions import defs

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "definitions.json"


def _partitions(partitions_def) -> str | None:
    if partitions_def is None:
        return None
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return " x ".join(f"{d.name}:{_partitions(d.partitions_def)}" for d in partitions_def.partitions_defs)
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return f"dynamic {partitions_def.name}"
    return str(partitions_def)


def shape() -> dict:
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "partition_mappings": {k.to_user_string(): type(m).__name__ for k, m in node.partition_mappings.items()},
            "partitions": _partitions(node.partitions_def),
            "kinds": sorted(node.kinds),
            "pools": sorted(node.pools or ()),
            "checks": sorted(c.name for c in node.check_keys),
            "automation": str(node.automation_condition.get_label() or type(node.automation_condition).__name__)
            if node.automation_condition else None,
            "tags": {k: v for k, v in sorted(node.tags.items()) if not k.startswith("dagster/kind/")},
        }
    jobs = {}
    for job in sorted(defs.resolve_all_job_defs(), key=lambda j: j.name):
        if job.name.startswith("__"):
            continue
        selection = job.asset_layer.selected_asset_keys if job.is_asset_job else set()
        jobs[job.name] = {"assets": sorted(k.to_user_string() for k in selection),
                          "partitions": _partitions(job.partitions_def)}
    sensors = {s.name: {"jobs": sorted(j.name for j in s.jobs) if s.has_jobs else [],
                        "default_status": s.default_status.value}
               for s in sorted(defs.get_repository_def().sensor_defs, key=lambda s: s.name)}
    schedules = {s.name: {"cron": s.cron_schedule, "job": s.job_name}
                 for s in sorted(defs.get_repository_def().schedule_defs, key=lambda s: s.name)}
    return {"assets": assets, "jobs": jobs, "sensors": sensors, "schedules": schedules,
            "resources": sorted(defs.resources)}


def test_definitions_match_the_snapshot():
    current = json.dumps(shape(), indent=2, sort_keys=True) + "\n"
    if os.environ.get("ORCHRM_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(current)
    assert SNAPSHOT.exists(), f"no snapshot yet: run with ORCHRM_UPDATE_SNAPSHOTS=1 to write {SNAPSHOT}"
    assert current == SNAPSHOT.read_text(), "the code location changed: review the diff, then update the snapshot"


def test_the_lineage_is_one_chain_from_problems_to_scores():
    graph = defs.resolve_asset_graph()
    upstream = {key.to_user_string(): {k.to_user_string() for k in graph.get(key).parent_keys}
                for key in graph.get_all_asset_keys()}

    def ancestors(name: str) -> set[str]:
        found, todo = set(), [name]
        while todo:
            for parent in upstream[todo.pop()]:
                if parent not in found:
                    found.add(parent)
                    todo.append(parent)
        return found

    assert {"problems", "orchestration_samples", "execution_artifacts", "runs", "labels", "pairs",
            "reward_model"} <= ancestors("rm_scores")
