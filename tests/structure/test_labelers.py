"""Every registered labeler is complete: it keeps the protocol, the MAS's answer-format prompt it names exists and
renders with no values, and no benchmark prefix is claimed twice. A labeler that forgets its prompt fails here, not
in a run."""

from __future__ import annotations

import pytest

from orchrm_dagster.labels import Claim, Labeler, answer_type_for, labelers
from orchrm_dagster.mas import render_prompt

LABELERS = sorted(labelers().items())


@pytest.mark.parametrize("answer_type, labeler", LABELERS, ids=[t for t, _ in LABELERS])
def test_every_labeler_keeps_the_protocol_and_its_prompt_renders(answer_type, labeler):
    assert isinstance(labeler, Labeler) and labeler.answer_type == answer_type
    assert labeler.name and labeler.version and labeler.benchmark_prefixes
    assert all(prefix == prefix.strip().lower() and prefix for prefix in labeler.benchmark_prefixes)
    instruction = render_prompt(labeler.prompt_file)  # no placeholders: it is itself the value of {answer_format}
    assert instruction.strip() and not instruction.startswith("#")


def test_labeler_names_and_benchmark_prefixes_are_each_one_labelers():
    names = [labeler.name for _, labeler in LABELERS]
    prefixes = [prefix for _, labeler in LABELERS for prefix in labeler.benchmark_prefixes]
    assert len(set(names)) == len(names)
    assert len(set(prefixes)) == len(prefixes)


def test_every_benchmark_prefix_leads_to_its_labeler_and_some_labeler_takes_any_problem():
    for answer_type, labeler in LABELERS:
        for prefix in labeler.benchmark_prefixes:
            assert answer_type_for(prefix + "_eval", None, None) == answer_type
    assert any(labeler.claim(None, None) >= Claim.FALLBACK for _, labeler in LABELERS)
    assert answer_type_for("a-benchmark-no-labeler-names", None, None) in labelers()


def test_every_shipped_benchmark_problem_has_a_labeler():
    from orchrm_dagster.problems import load_problems, problem_sources

    shipped = set(load_problems(problem_sources([])).table.column("answer_type").to_pylist())
    assert shipped and shipped <= set(labelers())
