"""`export_pairs` / `orchrm export-pairs`: the pairs reward-model training reads, out in the published OrchRM format
(JSONL or Parquet, local or S3), and back in through `import_files` as the same pairs."""

import orjson
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.labels import label_batch
from orchrm_dagster.pairs import (PUBLISHED_FIELDS, PairRules, build_pairs_table, export_pairs, import_published,
                                  training_pair_texts)
from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
from orchrm_dagster.storage import StorageRoot, Warehouse, land
from orchrm_dagster.synthetic import generate_runs, write_jsonl


def pairs_from_runs(root: StorageRoot, tmp_path, rules: PairRules = PairRules()) -> None:
    """Lands, ingests and labels synthetic runs on a few problems, and builds the pairs."""
    path = tmp_path / "rollout.jsonl"
    write_jsonl(generate_runs(64, seed=1, plans_decide=True, samples_per_problem=8), path)
    landed = land(root, path)
    ingest_batch(root, landed.batch_id, landed.path)
    label_batch(root, landed.batch_id, reference_answers(load_problems(problem_sources([])).table))
    build_pairs_table(root, Warehouse(root), rules)


def published(texts: pl.DataFrame) -> set[tuple]:
    return set(texts.select("question", "chosen_plan", "rejected_plan", "source").iter_rows())


def imported(path: str, root: StorageRoot | None = None) -> set[tuple]:
    result = import_published(path, PairRules(), root=root)
    assert result.rejected == []
    return published(result.table)


@pytest.fixture
def root_with_pairs(storage_root, tmp_path) -> StorageRoot:
    pairs_from_runs(storage_root, tmp_path)
    return storage_root


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_export_then_import_gives_the_same_pairs(root_with_pairs, tmp_path, suffix):
    path = str(tmp_path / "out" / f"pairs{suffix}")
    count = export_pairs(root_with_pairs, path)
    training = training_pair_texts(root_with_pairs)
    assert count == training.height > 0
    assert imported(path) == published(training)
    if suffix == ".parquet":
        assert pq.read_schema(path).names == list(PUBLISHED_FIELDS)
    else:
        first = orjson.loads(open(path, "rb").readline())
        assert list(first) == list(PUBLISHED_FIELDS)

    # through `import_files` into a root of its own: the pairs reward-model training reads there are the same
    elsewhere = StorageRoot(str(tmp_path / "elsewhere"))
    build_pairs_table(elsewhere, Warehouse(elsewhere), PairRules(import_files=(path,)))
    assert published(training_pair_texts(elsewhere)) == published(training)


def test_the_same_pairs_give_the_same_file_and_a_re_import_adds_no_record(root_with_pairs, tmp_path):
    first, second = str(tmp_path / "first.jsonl"), str(tmp_path / "second.jsonl")
    count = export_pairs(root_with_pairs, first)
    # the exported file imported into the same root: each pair is now there twice, built and imported
    build_pairs_table(root_with_pairs, Warehouse(root_with_pairs), PairRules(import_files=(first,)))
    assert training_pair_texts(root_with_pairs).height == 2 * count
    assert export_pairs(root_with_pairs, second) == count
    assert open(first, "rb").read() == open(second, "rb").read()


def test_filters_and_formats(root_with_pairs, tmp_path):
    training = training_pair_texts(root_with_pairs)
    only = str(tmp_path / "correct.jsonl")
    count = export_pairs(root_with_pairs, only, sources=("Correct-over-Incorrect",), splits=("train",))
    wanted = training.filter((pl.col("source") == "correct_over_incorrect") & (pl.col("split") == "train"))
    assert count == wanted.height > 0
    assert imported(only) == published(wanted)

    named = str(tmp_path / "pairs.data")
    with pytest.raises(ValueError, match="cannot tell the format"):
        export_pairs(root_with_pairs, named)
    assert export_pairs(root_with_pairs, named, fmt="parquet") == training.height
    assert pq.read_table(named).num_rows == training.height
    assert imported(named) == published(training)  # Parquet is read back whatever the file is called
    with pytest.raises(ValueError, match="correct_over_incorect: no pair has it"):
        export_pairs(root_with_pairs, only, sources=("correct_over_incorect",))
    with pytest.raises(ValueError, match="choose from train, validation"):
        export_pairs(root_with_pairs, only, splits=("test",))


def test_export_and_import_through_s3(tmp_path, s3_endpoint):
    root = StorageRoot("s3://orchrm-test/team-a", s3_endpoint)
    root.fs.mkdir("orchrm-test")
    pairs_from_runs(root, tmp_path)
    url = "s3://orchrm-test/exports/pairs.parquet"
    count = export_pairs(root, url)
    assert count == training_pair_texts(root).height > 0
    assert root.fs.exists("orchrm-test/exports/pairs.parquet")
    assert imported(url, root) == published(training_pair_texts(root))
    # `import_files` on the S3 root reads it with the root's endpoint
    build_pairs_table(root, Warehouse(root, str(tmp_path / "wh.duckdb")), PairRules(import_files=(url,)))
    assert training_pair_texts(root).height == 2 * count


def test_the_cli_exports_the_pairs(root_with_pairs, tmp_path):
    path = tmp_path / "cli.parquet"
    from orchrm_dagster.app.cli import main

    result = CliRunner().invoke(main, ["--storage", root_with_pairs.url, "export-pairs", str(path)])
    assert result.exit_code == 0, result.output
    count = training_pair_texts(root_with_pairs).height
    assert f"{count} pairs -> {path}" in result.output
    assert imported(str(path)) == published(training_pair_texts(root_with_pairs))

    wrong = CliRunner().invoke(main, ["--storage", root_with_pairs.url, "export-pairs", str(path), "--format", "csv"])
    assert wrong.exit_code != 0 and "choose from jsonl, parquet" in wrong.output
