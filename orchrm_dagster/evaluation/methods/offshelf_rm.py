"""`offshelf_rm`: the plan an off-the-shelf reward model scores highest, the only one executed (the paper's
off-the-shelf RM baseline).

Any Hugging Face sequence-classification model (`offshelf_rm.model`: a folder, or an installed package that ships
one). Without one the method is left out, with a note that says why: the untrained backbone with a randomly
initialised head is no baseline. It is loaded as training loads a backbone (`load_backbone`) and scored by the
champion's own `RewardScorer`, reading each (question, plan) with the champion's input spec unless the settings name
another. Scores are cached in `offshelf_scores` by (model, weights, head seed, input spec) and run, so an evaluation
scores only runs no earlier one did; the tokens the model reads are the method's verification tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from orchrm_dagster.contract import OFFSHELF_SCORES
from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, Preparation, register_method
from orchrm_dagster.evaluation.methods.common import ranked_choice
from orchrm_dagster.evaluation.pools import run_texts
from orchrm_dagster.evaluation.settings import EvaluationSettings, OffShelfRMSettings
from orchrm_dagster.rm import InputSpec
from orchrm_dagster.storage import scan_table

NAME = "offshelf_rm"
SETTING = "offshelf_rm.model"


@dataclass(frozen=True)
class OffShelfModel:
    path: str  # the model folder
    spec: InputSpec  # how it reads (question, plan)
    seed: int  # seeds a freshly initialised scalar head
    scorer_id: str  # names its scores in `offshelf_scores`


def choose(pool: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    return ranked_choice(pool, "offshelf_score", n, "offshelf_tokens")


def left_out(settings: EvaluationSettings) -> str | None:
    if settings.offshelf_rm.model:
        return None
    return (f"{NAME}: left out, no off-the-shelf model is configured ({SETTING}); the untrained backbone with a "
            f"randomly initialised head is no baseline")


def prepare(preparation: Preparation) -> None:
    """Adds each run's off-the-shelf score and tokens (`offshelf_score`, `offshelf_tokens`) to the pool, scoring
    only the runs the cache lacks."""
    model = offshelf_model(preparation.root, preparation.settings, preparation.champions)
    cached = (scan_table(preparation.root, "offshelf_scores").filter(pl.col("scorer_id") == model.scorer_id)
              .select("run_id", "score", "tokens").unique(subset="run_id", keep="last").collect())
    missing = preparation.pool.select("run_id").join(cached, on="run_id", how="anti")
    if missing.height:
        texts = run_texts(preparation.root, missing["run_id"].to_list())
        scores, tokens = score_plans(model, preparation.settings.offshelf_rm, texts["question"].to_list(),
                                     texts["plan"].to_list())
        fresh = pl.DataFrame({"run_id": texts["run_id"], "score": scores, "tokens": tokens},
                             schema={"run_id": pl.String, "score": pl.Float64, "tokens": pl.Int64})
        cached = pl.concat([cached, fresh])
        _write_cache(preparation.root, model, cached)
    preparation.pool = preparation.pool.join(
        cached.rename({"score": "offshelf_score", "tokens": "offshelf_tokens"}), on="run_id", how="left")
    preparation.reports[NAME] = {"model": model.path, "scorer_id": model.scorer_id,
                                 "input_format": model.spec.input_format, "max_length": model.spec.max_length,
                                 "newly_scored": missing.height}


def offshelf_model(root, evaluation: EvaluationSettings, champions) -> OffShelfModel:
    """The model the settings name, checked, with the input spec it reads by."""
    if unset := left_out(evaluation):
        raise ValueError(unset)
    settings = evaluation.offshelf_rm
    champion_spec = champion_input_spec(root, champions)
    path = model_folder(settings.model)
    check_sequence_classifier(path)
    spec = dataclasses.replace(champion_spec, input_format=settings.input_format or champion_spec.input_format,
                               max_length=settings.max_length or champion_spec.max_length)
    return OffShelfModel(path, spec, settings.seed, scorer_id(path, spec, settings.seed))


def champion_input_spec(root, champions) -> InputSpec:
    """The input spec the newest champion was trained with; the training default when there is no champion or it
    left no manifest."""
    from orchrm_dagster.rm import RMTrainConfig, list_versions, newest_champion, synced_checkpoints_dir

    version = newest_champion(champions)
    manifests = list_versions(str(synced_checkpoints_dir(root))) if version is not None else []
    config = next((m.get("config", {}) for m in manifests if m["version"] == version), {})
    known = {name: config[name] for name in ("input_format", "max_length", "thinking_tokens") if name in config}
    return RMTrainConfig(**known).input_spec()


def model_folder(name: str) -> str:
    """`name` if it is a folder, else the model folder an installed package of that name ships (get_model_path());
    ValueError naming the setting otherwise."""
    if os.path.isdir(name):
        return name
    if all(part.isidentifier() for part in name.split(".")) and importlib.util.find_spec(name) is not None:
        package = importlib.import_module(name)
        if hasattr(package, "get_model_path"):
            return str(package.get_model_path())
    raise ValueError(f"{SETTING}: {name!r} is neither a model folder nor an installed package that ships one "
                     f"(with get_model_path())")


def check_sequence_classifier(path: str) -> None:
    """ValueError naming the setting and the path unless `path` holds a model that takes a scalar
    sequence-classification head (a backbone, or a classifier with one label)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"{SETTING}: {path} holds no Hugging Face model config ({error})") from error
    if type(config) not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING:
        raise ValueError(f"{SETTING}: {path} is a {config.model_type} model, which has no sequence-classification "
                         f"head")
    classifier = any(name.endswith("ForSequenceClassification") for name in config.architectures or ())
    if classifier and config.num_labels != 1:
        raise ValueError(f"{SETTING}: {path} is a classifier with {config.num_labels} labels; a reward model has "
                         f"one scalar output")


def scorer_id(path: str, spec: InputSpec, seed: int) -> str:
    """Names a model's scores: its folder, the names and sizes of its weight files, the head's seed, the spec."""
    folder = os.path.realpath(path)
    weights = sorted((f, os.path.getsize(os.path.join(folder, f))) for f in os.listdir(folder)
                     if f.endswith((".safetensors", ".bin")))
    key = json.dumps([folder, weights, seed, spec.as_dict()])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def score_plans(model: OffShelfModel, settings: OffShelfRMSettings, questions: list[str],
                plans: list[str]) -> tuple[list[float], list[int]]:
    """Scores and tokens read, by `RewardScorer` on the model as training would initialise it (`load_backbone`:
    a scalar head seeded with `model.seed` where it has none), saved with its input spec like a checkpoint."""
    from orchrm_dagster.rm import RewardScorer, load_backbone, write_input_spec

    with tempfile.TemporaryDirectory(prefix="orchrm-offshelf-") as folder:
        network, tokenizer = load_backbone(model.path, model.seed)
        network.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        write_input_spec(folder, model.spec)
        scorer = RewardScorer(folder, settings.device, batch_size=settings.batch_size)
        return scorer.score_with_lengths(questions, plans)


def _write_cache(root, model: OffShelfModel, scores: pl.DataFrame) -> None:
    rows = scores.select(scorer_id=pl.lit(model.scorer_id), model=pl.lit(model.path),
                         input_spec=pl.lit(json.dumps(model.spec.as_dict())), run_id="run_id",
                         score="score", tokens="tokens")
    with tempfile.TemporaryDirectory(prefix="orchrm-offshelf-scores-") as staging:
        path = str(Path(staging, "scores.parquet"))
        pq.write_table(rows.to_arrow().cast(OFFSHELF_SCORES), path, compression="zstd")
        root.replace_batch("offshelf_scores", model.scorer_id, [path])


OFFSHELF_RM = register_method(EvaluationMethod(
    name=NAME, description=f"the plan an off-the-shelf reward model scores highest (needs {SETTING})",
    kind=MethodKind.RANKED, choose=choose, executes_all=False, prepare=prepare, left_out=left_out))
