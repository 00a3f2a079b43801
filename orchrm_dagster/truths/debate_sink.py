"""`debate_sink`: the cue sits in the graph's structure. A plan whose sink (the agent whose output is the answer) is
a `sink_agent` (DebateAgent) fed by at least `min_inputs` other agents answers correctly with chance `hit`; any
other plan with chance `miss`. The agents' own types elsewhere in the plan do not matter."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.plans import KNOWN_AGENTS, Plan
from orchrm_dagster.truths import TruthFunction, register_truth


@engine_config
class DebateSinkSettings:
    sink_agent: str = Field(default="DebateAgent", description="The agent type the sink must be")
    min_inputs: int = Field(default=2, description="Agents that must feed the sink directly")
    hit: float = Field(default=0.85, description="Chance of a correct answer for a plan with that structure")
    miss: float = Field(default=0.15, description="Chance for any other plan")

    def __post_init__(self) -> None:
        if self.sink_agent not in KNOWN_AGENTS:
            raise ValueError(f"debate_sink: unknown agent {self.sink_agent!r}; known: {', '.join(KNOWN_AGENTS)}")
        if self.min_inputs < 1 or not (0 <= self.miss <= 1 and 0 <= self.hit <= 1):
            raise ValueError("debate_sink: min_inputs must be >= 1, hit and miss in [0, 1]")


def has_structure(plan: Plan, sink_agent: str, min_inputs: int) -> bool:
    sink = plan.sink
    if sink is None:
        return False
    feeding = {source for source, target in plan.edges if target == sink}
    return plan.agent(sink).agent_name == sink_agent and len(feeding) >= min_inputs


def probability(config: DebateSinkSettings, plan: Plan) -> float:
    return config.hit if has_structure(plan, config.sink_agent, config.min_inputs) else config.miss


TRUTH = register_truth(TruthFunction(
    name="debate_sink", description="hit if the sink is a DebateAgent fed by at least two agents, else miss: a cue "
                                    "in the graph's structure",
    config=DebateSinkSettings, probability=probability))
