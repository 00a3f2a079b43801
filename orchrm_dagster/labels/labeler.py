"""What a labeler is: the `Labeler` protocol, and the registry of labelers.

One labeler per answer type, each in a module of this package that calls `register_labeler` when imported; the first
read of the registry imports every module here but the shared helpers (`LABELERS.skip`). Another distribution adds one
through the `orchrm.labelers` entry-point group, and `LabelSettings.answer_types` may name one by dotted path
(`my_pkg.my_module:my_labeler`). The labels, the problems' answer types, the settings' validation and the MAS's
answer-format prompt all read the registry, so a new answer type is one new module, its answer-format prompt (unless
it shares one) and its test.
"""

from __future__ import annotations

import operator
from enum import IntEnum
from typing import Protocol, Sequence, runtime_checkable

from orchrm_dagster.registry import Registry

from .verdict import Verdict


class Claim(IntEnum):
    """How surely a problem is a labeler's, from the problem's own data (its reference answer and choices)."""

    NONE = 0
    FALLBACK = 1  # the labeler of problems nobody claims more surely
    LIKELY = 2  # its reference looks like this type: decides for a benchmark no labeler's prefixes name
    CERTAIN = 3  # settled whatever the benchmark (a problem that lists choices is multiple choice)


@runtime_checkable
class Labeler(Protocol):
    name: str  # recorded in labels.labeler
    version: str  # recorded in labels.labeler_version: a new version means relabeling every stored run
    answer_type: str  # the problems' answer_type it judges (one labeler per type)
    benchmark_prefixes: tuple[str, ...]  # lower-case benchmark names starting with one are of its type
    # The MAS prompt (orchrm_dagster/mas/prompts/<prompt_file>.txt) that asks for an answer in the form it reads
    prompt_file: str

    def claim(self, reference: str | None, choices: Sequence[str] | None) -> Claim:
        """How surely a problem with this reference answer and these choices is of this labeler's type."""
        ...

    def label(self, reference: str, text: str, choices: Sequence[str] | None, **options) -> Verdict:
        """The verdict on `text` (the final answer, unwrapped and non-empty) against a non-empty `reference`.
        `options` are the label settings' (`qa_f1_threshold`); a labeler ignores those it does not use."""
        ...


LABELERS: Registry[Labeler] = Registry(
    "answer_type", __package__, group="orchrm.labelers", key=operator.attrgetter("answer_type"), entry_type=Labeler,
    skip=("batch", "distractor", "extract", "labeler", "math_size", "registry", "time_limit", "verdict"))
register_labeler = LABELERS.register  # makes a labeler the one of its answer type (what its module does on import)
labelers = LABELERS.all  # every registered labeler by answer type, sorted by answer type
answer_types = LABELERS.names


def labeler_for(answer_type: str) -> Labeler:
    """The labeler of `answer_type` (or of a dotted path to a labeler); ValueError naming the known answer types
    otherwise."""
    return LABELERS.named(answer_type)
