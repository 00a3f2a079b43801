"""No self-deception in the data (issue 29): what the pipeline makes of a batch whose correctness ignores the plan, and
of a batch where a checkpoint policy this root never saw is mostly wrong. Everything goes through the real assets
and commands, on a fresh storage root and Dagster instance under a temporary folder.

    .venv/bin/python bench/self_deception.py [--noise-runs 1920] [--checkpoint-runs 1920] [--train-pairs 128]

(a) Noise: runs of one base policy, each right with probability 0.5 whatever its plan (`generate_runs(rates=...)`):
    nothing in a plan tells a right run from a wrong one. Ingest; the `pairs` asset; `reward_model` and `rm_scores`
    in one run (the blocking `champion_beats_chance` check between them); the loop's decision; a GRPO round's
    champion lookup; `orchrm serve`, started as a user starts it, asked to score two plans.
(b) Unknown checkpoint: runs of a base and a specialized policy (right 70% of the time) and of `someone-elses-grpo`,
    a `checkpoint` this root never trained (right 20%), on the same problems. The `pairs` asset; the pairs by source
    and by the policy of their chosen run; and the same build under the old rule (every checkpoint on the
    specialized side) for comparison.

The reward model trains as `make run`'s does (the packaged MiniLM, --train-pairs pairs, one epoch) on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORK = Path(tempfile.mkdtemp(prefix="orchrm-self-deception-"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ["DAGSTER_HOME"] = str(WORK / "dagster")
os.environ["ORCHRM_STORAGE"] = str(WORK / "storage")

import httpx  # noqa: E402
import polars as pl  # noqa: E402

from orchrm_dagster.definitions import build_definitions  # noqa: E402
from assets.runs import failure_cause  # noqa: E402
from orchrm_dagster.app.commands import ingest_files, materialization_metadata, materialize_selection  # noqa: E402
from orchrm_dagster.loop import decide, read_state  # noqa: E402
from orchrm_dagster.pairs import PairRules, build_pairs  # noqa: E402
from orchrm_dagster.rm import (NoChampion, ScoringSettings, champion_scorer, list_versions,  # noqa: E402
                               synced_checkpoints_dir)
from orchrm_dagster.synthetic import generate_runs, write_jsonl  # noqa: E402

NOISE_POLICY = ("noise-orchestrator", "base", None)
UNKNOWN_CHECKPOINT = ("someone-elses-grpo", "checkpoint", 300)
BASE, SPECIALIZED = ("base-orchestrator", "base", None), ("specialized-orchestrator", "specialized", None)


def figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def section(title: str) -> None:
    print(f"\n== {title}")


def by_source(metadata: dict) -> str:
    return str(metadata["by_source"]).split("\n", 2)[-1].strip() if "by_source" in metadata else "(none)"


def ingest(defs, name: str, records) -> None:
    path = WORK / name
    count = write_jsonl(records, path)
    [outcome] = ingest_files(defs, [path])
    print(f"ingested {name}: {count} runs, {outcome.status}")


def noise(defs, runs: int, train_pairs: int) -> None:
    section(f"(a) noise: {runs} runs of one base policy, right with probability 0.5 whatever the plan")
    ingest(defs, "noise.jsonl", generate_runs(runs, seed=11, policies=(NOISE_POLICY,),
                                              rates={NOISE_POLICY[0]: 0.5}))
    pairs = materialization_metadata(materialize_selection(defs, 'key:"pairs"', None), "pairs")
    print(f"pairs: {pairs['dagster/row_count']}\n{by_source(pairs)}")

    started = time.perf_counter()
    config = {"ops": {"reward_model": {"config": {"max_train_pairs": train_pairs}}}}
    result = materialize_selection(defs, 'key:"reward_model" or key:"rm_scores"', None, config)
    print(f"reward_model + rm_scores in one run: success={result.success} ({time.perf_counter() - started:.0f} s)")
    if not result.success:
        print(f"  failed: {failure_cause(result.all_events)}")
    checks = [e.asset_check_evaluation_data for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    for check in checks:
        print(f"  check {check.check_name}: passed={check.passed}")
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    print(f"  materialized: {sorted(materialized)} (rm_scores after the failed blocking check: "
          f"{'ran' if 'rm_scores' in materialized else 'did not run'})")

    root = defs.resources["storage"].storage_root()
    for version in list_versions(str(synced_checkpoints_dir(root))):
        metrics = version["metrics"]
        print(f"v{version['version']}: {version['n_train_pairs']} train pairs, {version['n_validation_pairs']} "
              f"validation pairs, validation accuracy {figure(metrics.get('val_accuracy'))}")
        for domain, verdict in sorted(metrics.get("verdicts", {}).items()):
            print(f"  {domain}: {verdict['pairs']} pairs, accuracy {figure(verdict['accuracy'])}, "
                  f"p = {figure(verdict.get('p_value'))}, champion: {verdict['becomes_champion']}"
                  + (f" ({verdict['refusal']})" if verdict["refusal"] else ""))

    section("(a) what refuses, and why")
    decision = decide(read_state(root), defs.resources["loop"].to_engine())
    print(f"loop: steps {[s.key for s in decision.steps]}, blocked: {decision.blocked}")
    try:
        champion_scorer(root, ScoringSettings(device="cpu"), "math")
    except NoChampion as refusal:
        print(f"GRPO round / Best-of-N (champion_scorer): NoChampion: {refusal}")
    serve_refusal()


def serve_refusal() -> None:
    """`orchrm serve` as a user starts it (its own process), asked to score two plans of a math problem."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    orchrm = Path(sys.executable).with_name("orchrm")
    server = subprocess.Popen([str(orchrm), "serve", "--port", str(port), "--device", "cpu"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                health = httpx.get(f"{url}/v1/health", timeout=5)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"orchrm serve did not start: {server.stdout.read()}") from None
                time.sleep(0.5)
        answer = httpx.post(f"{url}/v1/score", timeout=30, json={
            "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
                        "May. How many clips did Natalia sell altogether in April and May?",
            "plans": ["<agent_name>CoTAgent</agent_name>", "<agent_name>SCAgent</agent_name>"], "domain": "math"})
        print(f"orchrm serve: GET /v1/health -> {health.status_code}; POST /v1/score -> {answer.status_code} "
              f"{json.dumps(answer.json())}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def unknown_checkpoint(defs, runs: int) -> None:
    section(f"(b) {runs} runs: base and specialized right 70% of the time, an unknown checkpoint 20%")
    rates = {BASE[0]: 0.7, SPECIALIZED[0]: 0.7, UNKNOWN_CHECKPOINT[0]: 0.2}
    ingest(defs, "checkpoint.jsonl", generate_runs(runs, seed=12, policies=(BASE, SPECIALIZED, UNKNOWN_CHECKPOINT),
                                                   rates=rates))
    pairs = materialization_metadata(materialize_selection(defs, 'key:"pairs"', None), "pairs")
    print(f"pairs: {pairs['dagster/row_count']}\n{by_source(pairs)}")
    print(str(pairs["policies"]).split("\n", 2)[-1].strip())
    warehouse = defs.resources["storage"].warehouse()
    rows = warehouse.query("select p.source, r.policy_name as chosen_policy, count(*) as pairs from pairs p "
                           "join runs r on r.run_id = p.chosen_run_id group by all order by all").to_pylist()
    print("pairs by the policy of their chosen run:")
    for row in rows:
        print(f"  {row['source']:<24} {row['chosen_policy']:<26} {row['pairs']}")
    with warehouse.scratch_connection(("runs", "labels")) as con:
        old = build_pairs(con, PairRules(), str(WORK / "old-rule.parquet"),
                          verified_checkpoints=(UNKNOWN_CHECKPOINT[0],))
        won = con.execute("select count(*) from read_parquet(?) p join runs r on r.run_id = p.chosen_run_id "
                          "where p.source = 'specialized_over_base' and r.policy_kind = 'checkpoint'",
                          [str(WORK / "old-rule.parquet")]).fetchone()[0]
    print(f"under the old rule (every checkpoint on the specialized side): {old.by_source}; specialized-over-base "
          f"pairs won by the unknown checkpoint's runs: {won}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--noise-runs", type=int, default=1920)
    parser.add_argument("--checkpoint-runs", type=int, default=1920)
    parser.add_argument("--train-pairs", type=int, default=128)
    args = parser.parse_args()
    print(f"work folder: {WORK}")
    defs = build_definitions()
    noise(defs, args.noise_runs, args.train_pairs)
    # a second root: the checkpoint batch is judged on its own
    os.environ["ORCHRM_STORAGE"] = str(WORK / "storage-checkpoint")
    unknown_checkpoint(build_definitions(), args.checkpoint_runs)


if __name__ == "__main__":
    pl.Config.set_tbl_rows(50)
    main()
