"""The evaluation unit's config: which ways of choosing among N runs to compare, at which N, and how."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.evaluation.methods import method_named, method_names


@engine_config
class VerifierWeights:
    """How the collaborative verifier fuses its evaluators' partial scores (each in [0, 1])."""

    agreement: float = Field(default=0.40, description="Share of the other candidates that give the same answer")
    format: float = Field(default=0.15, description="The answer is extractable, in the expected tags")
    steps: float = Field(default=0.10, description="The trajectory shows reasoning steps")
    length: float = Field(default=0.10, description="Cosine-scaled length: no penalty up to the target length")
    repetition: float = Field(default=0.10, description="1 minus the share of repeated word 3-grams")
    similarity: float = Field(default=0.15, description="MiniLM cosine similarity of trajectory and question")


@engine_config
class VerifierSettings:
    weights: VerifierWeights = Field(default_factory=VerifierWeights, description="The aggregator's weights")
    target_chars: int = Field(default=1500, description="Length up to which a trajectory is not penalised")
    max_chars: int = Field(default=6000, description="Length at which the length score reaches 0")
    similarity_model: str | None = Field(
        default=None, description="Sentence-embedding model folder; unset = the packaged all-MiniLM-L6-v2")
    max_length: int = Field(default=256, description="Tokens of a trajectory the embedding model reads")
    device: str = Field(default="auto", description="auto | cpu | cuda (the embedding model)")


@engine_config
class JudgeSettings:
    draws: int = Field(default=2, description="Candidate sets an LLM judge sees per problem and N (one call "
                                              "each, cached by problem, candidates and model)")
    max_candidate_chars: int = Field(
        default=600, description="Each plan or trajectory is cut to this many characters in the judge's prompt")
    max_new_tokens: int = Field(default=12, description="Tokens of the judge's answer")
    grammar: bool = Field(default=True, description="Constrain the judge's answer to <choice>k</choice> "
                                                    "(backends without grammars ignore this)")


@engine_config
class EvaluationSettings:
    benchmarks: tuple[str, ...] = Field(default=(), description="Only these benchmarks (empty: every one)")
    policies: tuple[str, ...] = Field(default=(), description="Only these policies (empty: every one)")
    methods: tuple[str, ...] = Field(
        default_factory=method_names,
        description="Ways of choosing among N runs to compare (default: every registered method, see "
                    "`orchrm evaluate --help`)")
    ns: tuple[int, ...] = Field(default=(1, 2, 4, 8), description="Candidate-set sizes N")
    draws: int = Field(default=64, description="Seeded candidate sets per problem and N for methods whose choice "
                                               "depends on the whole set, when there are more than max_enumerate")
    max_enumerate: int = Field(default=256, description="Up to this many possible sets, every one is used (exact)")
    bootstrap: int = Field(default=1000, description="Bootstrap resamples of problems for the 95% interval")
    seed: int = Field(default=0, description="Seeds the candidate-set draws and the bootstrap")
    verifier: VerifierSettings = Field(default_factory=VerifierSettings, description="The collaborative verifier")
    judge: JudgeSettings = Field(default_factory=JudgeSettings, description="The LLM judges")

    def __post_init__(self) -> None:
        for name in self.methods:
            method_named(name)  # ValueError naming an unknown method and the known ones
        if not self.ns or min(self.ns) < 1:
            raise ValueError("ns must hold candidate-set sizes >= 1")
        if self.draws < 1 or self.max_enumerate < 1 or self.bootstrap < 1:
            raise ValueError("draws, max_enumerate and bootstrap must be >= 1")

    @property
    def needs_llm_backend(self) -> bool:
        """Whether a chosen method (an LLM judge) takes an LLM backend."""
        return any(method_named(name).needs_llm for name in self.methods)
