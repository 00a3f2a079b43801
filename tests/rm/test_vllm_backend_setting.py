"""`ScoringSettings(backend="vllm")`: the champion's scorer asks a vLLM server (the fake /pooling server) for its
scores, reading the champion's checkpoint folder for the tokenizer and input spec."""

import pytest
from pydantic import ValidationError

from orchrm_dagster.rm import ScoringSettings, champion_scorer, train_new_version
from orchrm_dagster.rm.champions import write_champions
from orchrm_dagster.rm.checkpoints import checkpoints_dir
from orchrm_dagster.rm.template import encode
from orchrm_dagster.rm.vllm_scorer import VLLMPoolingScorer

from .test_domains import train_config
from .test_vllm_scorer import _fake_score, fake_vllm  # noqa: F401  (the fake server's fixture)
from .toy import toy_pairs


@pytest.fixture
def math_champion(storage_root, tiny_backbone):
    train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(0, 0), train_config(tiny_backbone))
    write_champions(checkpoints_dir(storage_root), {"math": 1})
    return storage_root


def test_the_champion_scores_on_the_vllm_server_and_ranks_as_it_says(math_champion, fake_vllm):
    url, requests = fake_vllm
    version, scorer = champion_scorer(math_champion, ScoringSettings(backend="vllm", vllm_url=url), "math")
    folder = str(checkpoints_dir(math_champion) / "v0001" / "model")
    assert version == 1 and isinstance(scorer, VLLMPoolingScorer)
    plans = ["<agent> step" * k for k in (3, 1, 5, 2)]
    scores = scorer.score(["q"] * 4, plans)
    expected = [_fake_score(row) for row in encode(scorer.tokenizer, ["q"] * 4, plans, scorer.spec)]
    assert scores == pytest.approx(expected)
    assert sorted(range(4), key=scores.__getitem__) == sorted(range(4), key=expected.__getitem__)
    # unset vllm_model: the name `vllm serve <checkpoint folder>` serves it under
    assert requests and all(path == "/pooling" and body["model"] == folder for path, body in requests)


def test_a_served_model_name_may_carry_the_version(math_champion, fake_vllm):
    url, requests = fake_vllm
    settings = ScoringSettings(backend="vllm", vllm_url=url, vllm_model="rm-v{version}", batch_size=2)
    _, scorer = champion_scorer(math_champion, settings, "math")
    scorer.score(["q"] * 3, ["a", "b", "c"])
    assert [body["model"] for _, body in requests] == ["rm-v1", "rm-v1"]


def test_backend_vllm_without_a_url_is_refused():
    with pytest.raises(ValidationError, match="backend vllm needs vllm_url"):
        ScoringSettings(backend="vllm")
    with pytest.raises(ValidationError):
        ScoringSettings(backend="onnx")
    assert ScoringSettings().backend == "transformers"


def test_serve_takes_the_backend_flags():
    from orchrm_dagster.app.cli.options import apply_options
    from orchrm_dagster.app.cli.serve import command
    from orchrm_dagster.serving.settings import ServeSettings

    ctx = command.make_context("serve", ["--backend", "vllm", "--vllm-url", "http://gpu:8000",
                                         "--vllm-model", "rm"])
    scoring = apply_options(ServeSettings(), ctx).scoring
    assert (scoring.backend, scoring.vllm_url, scoring.vllm_model) == ("vllm", "http://gpu:8000", "rm")
    with pytest.raises(Exception, match="backend vllm needs vllm_url"):
        apply_options(ServeSettings(), command.make_context("serve", ["--backend", "vllm"]))


def test_the_run_config_has_the_backend_fields():
    from assets.run_configs import ScoringConfig

    fields = ScoringConfig.to_config_schema().as_field().config_type.fields
    assert fields["backend"].default_value == "transformers"
    assert not fields["vllm_url"].is_required and not fields["vllm_model"].is_required
