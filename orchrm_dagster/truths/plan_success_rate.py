"""`plan_success_rate`: a plan answers correctly with chance `base + scale x` the share of its agents that check their
work (vote, debate, reflect). The generated history batches draw correctness from it too (synthetic.py)."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.plans import KNOWN_AGENTS, Plan
from orchrm_dagster.truths import TruthFunction, register_truth


@engine_config
class PlanSuccessRateSettings:
    base: float = Field(default=0.15, description="Chance of a correct answer for a plan without verifying agents")
    scale: float = Field(default=0.7, description="Added chance for a plan whose every agent verifies "
                                                  "(base + scale <= 1)")
    verifying_agents: tuple[str, ...] = Field(default=("SCAgent", "DebateAgent", "ReflexionAgent"),
                                              description="The agents that check their work")

    def __post_init__(self) -> None:
        if not (0 <= self.base and 0 <= self.scale and self.base + self.scale <= 1):
            raise ValueError("plan_success_rate: base and scale must be >= 0 with base + scale <= 1")
        unknown = set(self.verifying_agents) - set(KNOWN_AGENTS)
        if unknown:
            raise ValueError(f"plan_success_rate: unknown agents {sorted(unknown)}; known: {', '.join(KNOWN_AGENTS)}")


def verifying_share(plan: Plan, verifying_agents: tuple[str, ...]) -> float:
    """The share of the plan's agents that verify (0 for a direct answer)."""
    verifying = sum(agent.agent_name in verifying_agents for agent in plan.agents)
    return verifying / max(1, len(plan.agents))


def probability(config: PlanSuccessRateSettings, plan: Plan) -> float:
    return config.base + config.scale * verifying_share(plan, config.verifying_agents)


TRUTH = register_truth(TruthFunction(
    name="plan_success_rate", description="base + scale x the share of the plan's agents that verify (vote, debate, "
                                          "reflect): the generator's rule",
    config=PlanSuccessRateSettings, probability=probability))
