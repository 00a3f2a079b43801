"""One reward-model champion per domain: the gate, the pointer file, training's bookkeeping, and every run scored by
its domain's champion."""

import json
import math

import numpy as np
import polars as pl
import pytest

from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.rm import (NoChampion, RMTrainConfig, RewardScorer, ScoringSettings, batches_to_score,
                               benchmark_domains, checkpoint_table, current_champions, domain_of, read_champions,
                               score_runs, train_new_version)
from orchrm_dagster.rm.challenger import domain_trainings
from orchrm_dagster.rm.champions import crowned, gate, write_champions
from orchrm_dagster.rm.checkpoints import checkpoints_dir
from orchrm_dagster.rm.floor import Floor
from orchrm_dagster.storage import land, scan_table

from .toy import NO_FLOOR, toy_pairs

DOMAINS = ("choice", "math", "qa")
PAIR_DOMAINS = ["math", "math", "qa", "qa"]
NO_TEST = Floor(min_pairs=1, level=1.0)  # the champion/challenger rule alone, on a handful of pairs
FLOOR = Floor(min_pairs=20, level=0.05)


def test_a_version_better_on_qa_but_worse_on_math_becomes_qa_champion_only():
    champion_wins = {1: np.array([True, True, False, False])}
    challenger = np.array([False, True, True, True])
    judged = gate(challenger, champion_wins, PAIR_DOMAINS, DOMAINS, dict.fromkeys(DOMAINS, 1), margin=0.0,
                  floor=NO_TEST, version=2)
    assert {d: v.becomes_champion for d, v in judged.verdicts.items()} == {"choice": True, "math": False, "qa": True}
    math, qa, choice = judged.verdicts["math"], judged.verdicts["qa"], judged.verdicts["choice"]
    assert (math.pairs, math.accuracy, math.champion_accuracy) == (2, 0.5, 1.0)
    assert (qa.pairs, qa.accuracy, qa.champion_accuracy) == (2, 1.0, 0.0)
    assert (choice.pairs, choice.accuracy, choice.champion_accuracy) == (4, 0.75, 0.5)  # no pairs of its own: all
    assert not choice.own_pairs and math.own_pairs and qa.own_pairs
    assert judged.accuracy_by_domain == {"math": 0.5, "qa": 1.0}
    assert judged.champion_accuracy == 0.5  # one champion of every domain: its accuracy on every pair
    assert crowned(dict.fromkeys(DOMAINS, 1), judged.verdicts, 2) == {"choice": 2, "math": 1, "qa": 2}
    # within the margin it wins math too
    lenient = gate(challenger, champion_wins, PAIR_DOMAINS, DOMAINS, dict.fromkeys(DOMAINS, 1), margin=0.5,
                   floor=NO_TEST, version=2)
    assert all(v.becomes_champion for v in lenient.verdicts.values())


def test_each_domain_is_judged_against_its_own_champion():
    champions = {"math": 1, "qa": 2}
    wins = {1: np.array([True, False, False, False]), 2: np.array([False, False, True, True])}
    judged = gate(np.array([True, True, True, False]), wins, PAIR_DOMAINS, ("math", "qa"), champions, margin=0.0,
                  floor=NO_TEST, version=3)
    assert judged.verdicts["math"].champion_accuracy == 0.5 and judged.verdicts["math"].becomes_champion
    assert judged.verdicts["qa"].champion_accuracy == 1.0 and not judged.verdicts["qa"].becomes_champion
    assert judged.champion_accuracy is None  # the domains' champions differ: no single one to compare with


def test_a_domain_without_a_champion_takes_the_new_version_only_when_it_beats_chance():
    right = np.array([True] * 15 + [False] * 5)  # 15 of 20: p = P(X >= 15 | n=20, 0.5) = 0.0207
    judged = gate(right, {}, ["math"] * 20, ("math",), {}, margin=0.0, floor=FLOOR, version=1)
    verdict = judged.verdicts["math"]
    assert verdict.becomes_champion and verdict.refusal is None and verdict.p_value == pytest.approx(0.020695, abs=1e-6)
    # the first version of a domain included: 0.44 on 200 pairs is below chance, 0.55 on 200 not above it at 0.05
    for correct in (88, 110):
        wins = np.arange(200) < correct
        refused = gate(wins, {}, ["math"] * 200, ("math",), {}, margin=0.0, floor=FLOOR, version=1).verdicts["math"]
        tail = sum(math.comb(200, k) for k in range(correct, 201)) / 2 ** 200  # P(X >= correct | chance)
        assert not refused.becomes_champion and refused.p_value == pytest.approx(tail, rel=1e-9)
        assert refused.refusal == (f"v1's validation accuracy {correct / 200:.3f} on 200 pairs does not beat chance "
                                   f"(one-sided binomial test against 0.5: p = {refused.p_value:.3g} > 0.05): more "
                                   f"runs (pairs to learn from and to judge on) or a stronger model would")


def test_too_few_validation_pairs_or_none_crown_no_one():
    few = gate(np.ones(19, bool), {}, ["qa"] * 19, ("qa",), {}, margin=0.0, floor=FLOOR, version=4).verdicts["qa"]
    assert not few.becomes_champion and few.p_value < 0.05
    assert few.refusal == ("v4 had 19 validation pairs there (accuracy 1.000, p = 1.9e-06 against chance), fewer "
                           "than min_validation_pairs (20): land more runs or lower min_validation_pairs")
    unvalidated = gate(np.zeros(0, bool), {}, [], DOMAINS, {}, margin=0.0, floor=NO_TEST, version=1)
    assert not any(v.becomes_champion for v in unvalidated.verdicts.values())
    assert {v.refusal for v in unvalidated.verdicts.values()} == {"v1 had no validation pairs there: nothing shows "
                                                                   "it learned; land runs of its problems"}


def test_a_domain_without_validation_pairs_of_its_own_says_so_instead_of_borrowing_another_s_count():
    judged = gate(np.ones(18, bool), {}, ["math"] * 18, DOMAINS, {}, margin=0.0, floor=FLOOR, version=1).verdicts
    assert judged["math"].refusal.startswith("v1 had 18 validation pairs there (accuracy 1.000")
    for domain in ("choice", "qa"):
        assert not judged[domain].own_pairs and not judged[domain].becomes_champion
        assert judged[domain].refusal == ("v1 had no validation pairs of its own there, only 18 of other domains "
                                          "(accuracy 1.000, p = 3.8e-06 against chance), fewer than "
                                          "min_validation_pairs (20): land runs of its problems or lower "
                                          "min_validation_pairs")
    unknown = gate(np.ones(18, bool), {}, [None] * 18, ("qa",), {}, margin=0.0, floor=FLOOR, version=1).verdicts
    assert unknown["qa"].own_pairs  # no pair's domain known: every pair is all there is, nobody else's


def test_a_challenger_that_clears_the_floor_still_has_to_match_the_champion():
    champion = {1: np.ones(40, bool)}
    judged = gate(np.arange(40) < 30, champion, ["math"] * 40, ("math",), {"math": 1}, margin=0.0, floor=FLOOR,
                  version=2).verdicts["math"]
    assert judged.p_value < 0.05 and not judged.becomes_champion
    assert judged.refusal == ("v2's validation accuracy 0.750 trails champion v1's 1.000 on the same 40 pairs by more "
                              "than the margin (0.0)")


def test_an_old_single_champion_pointer_names_every_domain(tmp_path, storage_root):
    (tmp_path / "champion.json").write_text(json.dumps({"version": 3}))
    assert read_champions(tmp_path, DOMAINS) == {"choice": 3, "math": 3, "qa": 3}
    write_champions(tmp_path, {"math": 3, "qa": 5})
    assert json.loads((tmp_path / "champion.json").read_text()) == {"champions": {"math": 3, "qa": 5}}
    assert read_champions(tmp_path, DOMAINS) == {"math": 3, "qa": 5}
    assert read_champions(tmp_path / "nowhere", DOMAINS) == {}
    (checkpoints_dir(storage_root) / "champion.json").write_text(json.dumps({"version": 1}))
    assert current_champions(storage_root) == {"choice": 1, "math": 1, "qa": 1}


def test_domain_of_a_benchmark():
    assert [domain_of(b) for b in ("gsm8k", "math500", "hotpotqa", "gpqa_diamond")] == ["math", "math", "qa", "choice"]


def train_config(backbone, **changes) -> RMTrainConfig:
    return RMTrainConfig(backbone=backbone, max_length=64, epochs=1, batch_size=4,
                         **{**NO_FLOOR, **changes})


def test_a_per_domain_version_stands_for_its_domain_only(storage_root, tiny_backbone):
    validation = toy_pairs(6, 1)
    domains = ["math", "math", "math", "qa", "qa", "qa"]
    v1 = train_new_version(storage_root, toy_pairs(8, 0), validation, train_config(tiny_backbone), ["p"],
                           validation_domains=domains)
    assert v1.domains == DOMAINS and v1.champion_of == DOMAINS and v1.previous_champions == {}
    assert set(v1.metrics["accuracy_by_domain"]) == {"math", "qa"}
    v2 = train_new_version(storage_root, toy_pairs(8, 2), validation, train_config(tiny_backbone, seed=1), ["p"],
                           domains=("qa",), validation_domains=domains)
    assert v2.domains == ("qa",) and set(v2.verdicts) == {"qa"} and v2.verdicts["qa"].pairs == 3
    assert v2.verdicts["qa"].champion == 1
    qa_champion = 2 if v2.verdicts["qa"].becomes_champion else 1
    assert current_champions(storage_root) == {"choice": 1, "math": 1, "qa": qa_champion}
    rows = {r["version"]: r for r in checkpoint_table(storage_root).to_pylist()}
    assert rows[1]["domains"] == list(DOMAINS) and rows[2]["domains"] == ["qa"]
    assert rows[2]["champion_of"] == (["qa"] if qa_champion == 2 else [])
    assert rows[1]["champion_of"] == (["choice", "math"] if qa_champion == 2 else list(DOMAINS))
    assert rows[1]["is_champion"] and rows[2]["is_champion"] == (qa_champion == 2)
    assert set(json.loads(rows[1]["val_accuracy_by_domain"])) == {"math", "qa"}


def pairs_frame(domains: list) -> pl.DataFrame:
    return pl.DataFrame({"pair_id": [f"p{i}" for i in range(len(domains))], "domain": domains},
                        schema={"pair_id": pl.String, "domain": pl.String})


def test_per_domain_training_gives_small_domains_one_shared_model():
    train = pairs_frame(["math"] * 4 + ["qa"] * 2 + [None])
    validation = pairs_frame(["math", "qa"])
    shared = domain_trainings(train, validation, RMTrainConfig(), DOMAINS)
    assert [(domains, t.height, v.height) for domains, t, v in shared] == [(DOMAINS, 7, 2)]
    per_domain = domain_trainings(train, validation, RMTrainConfig(domain_models="per_domain", min_domain_pairs=3),
                                  DOMAINS)
    assert [(domains, t.height, v.height) for domains, t, v in per_domain] == [
        (("math",), 4, 1), (("choice", "qa"), 7, 2)]  # qa has too few pairs: it shares a model trained on all
    enough = domain_trainings(train, validation, RMTrainConfig(domain_models="per_domain", min_domain_pairs=0),
                              DOMAINS)
    assert [domains for domains, _, _ in enough] == [("choice",), ("math",), ("qa",)]


@pytest.fixture
def two_champions(storage_root, tiny_backbone, good_records, tmp_path):
    """Runs on gsm8k and hotpotqa; v1 champion of math, v2 (another seed: other scores) of qa."""
    for seed in (0, 1):
        train_new_version(storage_root, toy_pairs(8, seed), toy_pairs(0, 0), train_config(tiny_backbone, seed=seed))
    write_champions(checkpoints_dir(storage_root), {"math": 1, "qa": 2})
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in good_records) + "\n")
    landed = land(storage_root, path)
    ingest_batch(storage_root, landed.batch_id, landed.path)
    return storage_root, landed.batch_id


def test_each_run_is_scored_by_the_champion_of_its_domain(two_champions, good_records):
    root, batch = two_champions
    assert batches_to_score(root) == [batch]
    report = score_runs(root, ScoringSettings(device="cpu"))
    assert report.champions == {"math": 1, "qa": 2} and report.runs_scored == len(good_records)
    domains = [domain_of(r["benchmark"]) for r in good_records]
    assert report.runs_by_domain == {"math": domains.count("math"), "qa": domains.count("qa")}
    scores = scan_table(root, "rm_scores").collect()
    by_run = dict(zip(scores["run_id"], zip(scores["rm_version"], scores["score"])))
    models = {v: RewardScorer(str(checkpoints_dir(root) / f"v{v:04d}" / "model"), "cpu") for v in (1, 2)}
    for record in good_records:
        version = 1 if domain_of(record["benchmark"]) == "math" else 2
        expected = models[version].score([record["question"]], [record["plan"]])[0]
        assert by_run[record["run_id"]] == (version, pytest.approx(expected, abs=1e-5))
    assert models[1].score(["q"], ["plan"]) != models[2].score(["q"], ["plan"])  # the routing is visible


def test_a_batch_is_stale_when_any_run_is_not_scored_by_its_domains_champion(two_champions):
    root, batch = two_champions
    score_runs(root, ScoringSettings(device="cpu"))
    assert batches_to_score(root) == []
    assert batches_to_score(root, {"math": 1, "qa": 2, "choice": 7}) == []  # no choice runs: nothing to rescore
    assert batches_to_score(root, {"math": 1, "qa": 1}) == [batch]  # the qa runs' champion changed
    assert batches_to_score(root, {"math": 1}) == [batch]  # qa scores by a version that is no champion
    write_champions(checkpoints_dir(root), {"math": 1, "qa": 1})
    report = score_runs(root, ScoringSettings(device="cpu"))
    assert report.batches_scored == 1 and batches_to_score(root) == []
    assert set(scan_table(root, "rm_scores").collect()["rm_version"]) == {1}


def test_runs_of_a_domain_without_a_champion_are_left_unscored(two_champions, good_records):
    root, _ = two_champions
    write_champions(checkpoints_dir(root), {"math": 1})
    report = score_runs(root, ScoringSettings(device="cpu"))
    qa_runs = sum(domain_of(r["benchmark"]) == "qa" for r in good_records)
    assert report.runs_without_champion == qa_runs > 0 and report.runs_scored == len(good_records) - qa_runs
    assert batches_to_score(root) == []  # until qa has a champion


def test_best_of_n_scores_a_benchmarks_plans_with_the_champion_of_its_domain(two_champions):
    import dataclasses

    from orchrm_dagster.orchestration import Cell, score_samples
    from tests.orchestration.test_best_of_n import sample

    root, _ = two_champions
    for benchmark, version in (("gsm8k", 1), ("hotpotqa", 2)):
        samples = [dataclasses.replace(sample("a", i), benchmark=benchmark) for i in range(2)]
        assert score_samples(root, Cell(benchmark, "p"), samples, ScoringSettings(device="cpu")).rm_version == version
    write_champions(checkpoints_dir(root), {"math": 1})
    with pytest.raises(NoChampion, match="Best-of-N on hotpotqa refused: no champion reward model for the qa domain: "
                                         "v2 had no validation pairs there"):
        score_samples(root, Cell("hotpotqa", "p"), [sample("a", 0)], ScoringSettings(device="cpu"))


def test_a_teams_benchmark_is_in_the_domain_its_settings_file_gives_it(tmp_path, monkeypatch):
    """`acme` falls in the default domain by its name alone; once the settings file says `labels.answer_types: {acme:
    math}` (as its runs are then labeled), its pairs, champion and served scores are math's; a change of the file is
    read again."""
    from orchrm_dagster.labels import benchmark_answer_type

    assert domain_of("acme") == benchmark_answer_type("acme") == "qa"
    settings = tmp_path / "orchrm.yaml"
    settings.write_text("labels:\n  answer_types:\n    acme: math\n")
    monkeypatch.setenv("ORCHRM_CONFIG", str(settings))
    assert domain_of("acme") == "math" and domain_of("gsm8k") == "math" and domain_of("hotpotqa") == "qa"
    assert benchmark_domains(pl.Series(["acme", "hotpotqa"])).to_list() == ["math", "qa"]
    settings.write_text("labels:\n  answer_types:\n    acme: choice\n    gsm8k: qa\n")
    assert domain_of("acme") == "choice" and domain_of("gsm8k") == "qa"
