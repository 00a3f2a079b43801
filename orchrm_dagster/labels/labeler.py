"""What a labeler is: the `Labeler` protocol, and the registry of labelers.

One labeler per answer type, each in a module of this package named `<something>_labeler.py` that calls
`register_labeler` when imported; the first read of the registry imports every such module. The labels, the
problems' answer types, the settings' validation and the MAS's answer-format prompt all read the registry, so a new
answer type is one new module, its answer-format prompt (unless it shares one) and its test.
"""

from __future__ import annotations

import importlib
import pkgutil
from enum import IntEnum
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

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


_REGISTERED: dict[str, Labeler] = {}  # answer type -> its labeler
_modules_imported = False


def register_labeler(labeler: Labeler) -> Labeler:
    """Makes `labeler` the labeler of its answer type (what a labeler's module does when imported)."""
    if _REGISTERED.get(labeler.answer_type, labeler) is not labeler:
        raise ValueError(f"two labelers for answer type {labeler.answer_type!r}: "
                         f"{_REGISTERED[labeler.answer_type].name} and {labeler.name}")
    _REGISTERED[labeler.answer_type] = labeler
    return labeler


def labelers() -> dict[str, Labeler]:
    """Every registered labeler by answer type, sorted by answer type."""
    _import_labeler_modules()
    return dict(sorted(_REGISTERED.items()))


def answer_types() -> tuple[str, ...]:
    return tuple(labelers())


def labeler_for(answer_type: str) -> Labeler:
    """The labeler of `answer_type`; ValueError naming the known answer types otherwise."""
    _import_labeler_modules()
    if answer_type not in _REGISTERED:  # looked up once per label: no copy of the registry here
        raise ValueError(f"unknown answer_type {answer_type!r}; expected one of {answer_types()}")
    return _REGISTERED[answer_type]


def _import_labeler_modules() -> None:
    global _modules_imported
    if not _modules_imported:
        for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
            if module.name.endswith("_labeler"):
                importlib.import_module(f"{__package__}.{module.name}")
        _modules_imported = True
