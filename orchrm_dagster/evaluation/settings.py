"""The evaluation unit's config: which ways of choosing among N runs to compare, at which N, and how."""

from __future__ import annotations

from orchrm_dagster.devices import Device
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.evaluation.method import METHODS
from orchrm_dagster.rm import InputFormat


@engine_config
class VerifierWeights:
    """How the collaborative verifier fuses its evaluators' partial scores (each in [0, 1])."""

    agreement: float = Field(default=0.40, description="Share of the other candidates that give the same answer")
    format: float = Field(default=0.15, description="The answer is extractable, in the expected tags")
    steps: float = Field(default=0.10, description="The trajectory shows reasoning steps")
    length: float = Field(default=0.10, description="Cosine-scaled length: no penalty up to the target length")
    repetition: float = Field(default=0.10, description="1 minus the share of repeated word 3-grams")
    similarity: float = Field(default=0.15, description="MiniLM cosine similarity of trajectory and question")
    rank: float = Field(default=0.0, description="Share of pairwise comparisons won against the other candidates "
                                                 "(0: the fixed fusion leaves it out; the fitted one weighs it)")


@engine_config
class VerifierSettings:
    weights: VerifierWeights = Field(default_factory=VerifierWeights, description="The aggregator's weights")
    target_chars: int = Field(default=1500, description="Length up to which a trajectory is not penalised")
    max_chars: int = Field(default=6000, description="Length at which the length score reaches 0")
    similarity_model: str | None = Field(
        default=None, description="Sentence-embedding model folder; unset = the packaged all-MiniLM-L6-v2")
    max_length: int = Field(default=256, description="Tokens of a trajectory the embedding model reads")
    device: str = Field(default="auto", description="auto | cpu | cuda (the embedding model)")
    min_fit_runs: int = Field(
        default=20, description="collaborative_verifier fits its fusion weights on at least this many labeled runs "
                                "of problems the reward model saw (both outcomes among them); else the fixed weights")
    max_fit_problems: int = Field(
        default=200, description="collaborative_verifier fits on the runs of at most this many of those problems "
                                 "(a seeded sample): the fit's scoring cost stays bounded however large the history")


@engine_config
class OffShelfRMSettings:
    model: str | None = Field(
        default=None, description="Sequence-classification model folder, or an installed package that ships one (its "
                                  "get_model_path()); unset = offshelf_rm is left out (an untrained backbone with a "
                                  "random head is no baseline)")
    input_format: InputFormat | None = Field(default=None, description="graph_first | plan_text; unset = the "
                                                                       "champion's")
    max_length: int | None = Field(default=None, description="Tokens of (question, plan) read; unset = the champion's")
    seed: int = Field(default=0, description="Seeds a scalar head where the model has none")
    device: Device = Field(default="auto", description="auto | cpu | cuda")
    batch_size: int = Field(default=32, description="Plans per forward pass at most")


@engine_config
class JudgeSettings:
    draws: int = Field(default=2, ge=1, description="Candidate sets an LLM judge sees per problem and N (each call "
                                              "cached by problem, candidates, model and reading)")
    max_candidate_chars: int = Field(
        default=600, description="The truncated judges (trajectory_judge_truncated) cut each trajectory to this many "
                                 "characters; the full ones read candidates whole")
    context_tokens: int = Field(
        default=8192, description="The judge model's context: when N whole candidates do not fit one prompt, they "
                                  "are judged in a knockout of groups that fit (the embedded SmolLM2: 8192)")
    max_new_tokens: int = Field(default=12, description="Tokens of the judge's answer")
    grammar: bool = Field(default=True, description="Constrain the judge's answer to <choice>k</choice> "
                                                    "(backends without grammars ignore this)")
    ns: tuple[int, ...] = Field(
        default=(), description="Judge only at these candidate-set sizes N (empty: at every N of the evaluation); "
                                "each N costs the judges one call or more per problem and draw")


@engine_config
class EvaluationSettings:
    benchmarks: tuple[str, ...] = Field(default=(), description="Only these benchmarks (empty: every one)")
    policies: tuple[str, ...] = Field(default=(), description="Only these policies (empty: every one)")
    methods: METHODS.names_type = Field(
        default_factory=METHODS.names, description="Ways of choosing among N runs to compare, by name or by "
                                                   "dotted path to an EvaluationMethod")
    ns: tuple[int, ...] = Field(default=(1, 2, 4, 8), description="Candidate-set sizes N")
    draws: int = Field(default=64, description="Seeded candidate sets per problem and N for methods whose choice "
                                               "depends on the whole set, when there are more than max_enumerate")
    max_enumerate: int = Field(default=256, description="Up to this many possible sets, every one is used (exact)")
    bootstrap: int = Field(default=1000, description="Bootstrap resamples of problems for the 95% interval")
    seed: int = Field(default=0, description="Seeds the candidate-set draws and the bootstrap")
    verifier: VerifierSettings = Field(default_factory=VerifierSettings, description="The collaborative verifier")
    judge: JudgeSettings = Field(default_factory=JudgeSettings, description="The LLM judges")
    offshelf_rm: OffShelfRMSettings = Field(default_factory=OffShelfRMSettings,
                                            description="The off-the-shelf reward model baseline")

    def __post_init__(self) -> None:
        if not self.ns or min(self.ns) < 1:
            raise ValueError("ns must hold candidate-set sizes >= 1")
        if set(self.judge.ns) - set(self.ns):
            raise ValueError(f"judge.ns {list(self.judge.ns)} must be among ns {list(self.ns)}")
        if self.draws < 1 or self.max_enumerate < 1 or self.bootstrap < 1:
            raise ValueError("draws, max_enumerate and bootstrap must be >= 1")

    @property
    def needs_llm_backend(self) -> bool:
        """Whether a chosen method (an LLM judge) takes an LLM backend."""
        return any(METHODS.named(name).needs_llm for name in self.methods)
