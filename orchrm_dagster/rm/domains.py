"""Domains: a problem's domain is its benchmark's answer type (math, qa, choice: one per labeler), and each domain
has its own reward-model champion. The domain of each training pair, and a scorer that reads every plan with the
champion of its domain."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import polars as pl

from orchrm_dagster.labels import answer_types, benchmark_answer_type
from orchrm_dagster.settings_file import read_settings_file
from orchrm_dagster.storage import StorageRoot, scan_table


def all_domains() -> tuple[str, ...]:
    return answer_types()


def domain_of(benchmark: str) -> str:
    """The domain of a benchmark's problems, from its name alone: every problem and run of a benchmark has one
    domain (an evaluation row, a GRPO round, a plan-scores partition is of one benchmark). A benchmark the settings
    file names in `labels.answer_types` (a team's own, `acme: math`) is in the domain of that answer type, as its runs
    are labeled; any other by the built-in prefixes (gsm8k, hotpotqa...), else the default
    (`labels.benchmark_answer_type`)."""
    return _domain_of(benchmark, _configured_answer_types())


@functools.lru_cache(maxsize=1024)
def _domain_of(benchmark: str, answer_types: tuple[tuple[str, str], ...]) -> str:
    return benchmark_answer_type(benchmark, dict(answer_types))


def _configured_answer_types() -> tuple[tuple[str, str], ...]:
    """The settings file's `labels.answer_types` (read again when the file changes)."""
    configured = read_settings_file().section("labels").get("answer_types")
    return tuple(sorted((str(k), str(v)) for k, v in configured.items())) if isinstance(configured, dict) else ()


def benchmark_domains(benchmarks: pl.Series) -> pl.Series:
    """`domain_of` each value (looked up once per distinct benchmark)."""
    lookup = {b: domain_of(b) for b in benchmarks.drop_nulls().unique().to_list()}
    return benchmarks.replace_strict(lookup, default=None, return_dtype=pl.String).alias("domain")


def with_domains(root: StorageRoot, texts: pl.DataFrame) -> pl.DataFrame:
    """`texts` (rows with a problem_id: pairs) with a `domain` column: the domain of the problem's benchmark, known
    from its runs or the problems table; null for a problem neither knows (an imported pair on a problem never run
    nor loaded here)."""
    wanted = texts.select("problem_id").unique().lazy()
    known = (pl.concat([scan_table(root, "runs").select("problem_id", "benchmark"),
                        scan_table(root, "problems").select("problem_id", "benchmark")])
             .join(wanted, on="problem_id", how="semi")
             .group_by("problem_id").agg(pl.col("benchmark").first())
             .collect())
    known = known.with_columns(benchmark_domains(known["benchmark"])).select("problem_id", "domain")
    return texts.join(known, on="problem_id", how="left", maintain_order="left")


class DomainScorer:
    """Scores each (question, plan) with the champion of its domain. `scorer_of(version)` builds a version's
    `RewardScorer`; each is built once, when a plan of its domains is first scored."""

    def __init__(self, champions: Mapping[str, int], scorer_of: Callable[[int], object]):
        self.champions = dict(champions)
        self._scorer_of = scorer_of
        self._scorers: dict[int, object] = {}

    def version_of(self, domain: str) -> int | None:
        return self.champions.get(domain)

    def score(self, questions: Sequence[str], plans: Sequence[str], domains: Sequence[str]) -> list[float | None]:
        return self.score_with_lengths(questions, plans, domains)[0]

    def score_with_lengths(self, questions: Sequence[str], plans: Sequence[str], domains: Sequence[str]
                           ) -> tuple[list[float | None], list[int | None], list[int | None]]:
        """(scores, tokens read, the version that scored) of each input in input order; None for an input whose
        domain has no champion."""
        by_version: dict[int, list[int]] = defaultdict(list)
        for index, domain in enumerate(domains):
            if (version := self.champions.get(domain)) is not None:
                by_version[version].append(index)
        scores: list[float | None] = [None] * len(domains)
        tokens: list[int | None] = [None] * len(domains)
        versions: list[int | None] = [None] * len(domains)
        for version, indices in by_version.items():
            values, lengths = self._scorer(version).score_with_lengths([questions[i] for i in indices],
                                                                       [plans[i] for i in indices])
            for index, value, length in zip(indices, values, lengths):
                scores[index], tokens[index], versions[index] = value, length, version
        return scores, tokens, versions

    def _scorer(self, version: int):
        if version not in self._scorers:
            self._scorers[version] = self._scorer_of(version)
        return self._scorers[version]
