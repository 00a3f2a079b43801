"""`verifying_cue`: the generator's cue at another worth. A plan answers correctly with chance `base + worth x` the
share of its agents that verify (vote, debate, reflect), clipped to [0, 1]. With the generated history drawn from
`plan_success_rate` (worth 0.7), a reward model learns that verifying agents win; rounds executed under a smaller
worth (the default 0.1: the cue is worth less than the reward model thinks, yet accuracy can still move) or a
negative one (the cue punished) test whether the policy gate sees through it."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.plans import KNOWN_AGENTS, Plan
from orchrm_dagster.truths import TruthFunction, register_truth
from orchrm_dagster.truths.plan_success_rate import verifying_share


@engine_config
class VerifyingCueSettings:
    base: float = Field(default=0.15, description="Chance of a correct answer for a plan without verifying agents")
    worth: float = Field(default=0.1, description="Added chance for a plan whose every agent verifies (negative: "
                                                  "verifying lowers the chance); the result is clipped to [0, 1]")
    verifying_agents: tuple[str, ...] = Field(default=("SCAgent", "DebateAgent", "ReflexionAgent"),
                                              description="The agents that check their work")

    def __post_init__(self) -> None:
        if not 0 <= self.base <= 1 or not -1 <= self.worth <= 1:
            raise ValueError("verifying_cue: base must be in [0, 1] and worth in [-1, 1]")
        unknown = set(self.verifying_agents) - set(KNOWN_AGENTS)
        if unknown:
            raise ValueError(f"verifying_cue: unknown agents {sorted(unknown)}; known: {', '.join(KNOWN_AGENTS)}")


def probability(config: VerifyingCueSettings, plan: Plan) -> float:
    return min(1.0, max(0.0, config.base + config.worth * verifying_share(plan, config.verifying_agents)))


TRUTH = register_truth(TruthFunction(
    name="verifying_cue", description="base + worth x the share of verifying agents, worth 0.1 by default: the "
                                      "generator's cue worth less than a reward model trained on it thinks (negative: "
                                      "punished)",
    config=VerifyingCueSettings, probability=probability))
