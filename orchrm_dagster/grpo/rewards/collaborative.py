"""`collaborative`: execute each plan and score its trajectory with the collaborative verifier's panel (format,
steps, length, repetition, question similarity), plus its agreement with the other plans of its group."""

from __future__ import annotations

from orchrm_dagster.evaluation import VerifierSettings, agreement_score, static_scores, vote_key_of
from orchrm_dagster.grpo.rewards import register_reward
from orchrm_dagster.grpo.rewards.base import PlanReward, RewardContext, RewardKind, Rollouts


class CollaborativeReward(PlanReward):
    def __init__(self, rollouts: Rollouts, settings: VerifierSettings, margin: float, embedder=None):
        super().__init__(REWARD.name, margin)
        self.rollouts = rollouts
        self.settings = settings
        self.embedder = embedder

    def raw_rewards(self, plans, question, answer_type, problem_id, answer=None, choices=None, **_) -> list[float]:
        results = [item.result for item in self.rollouts.run_counted(self, question, plans, answer_type, answer,
                                                                     choices)]
        finals = [r.final_answer for r in results]
        texts = [f"Final answer: {r.final_answer or '(none)'}\n\n" + "\n\n".join(c.output for c in r.calls)
                 for r in results]
        static = static_scores(list(question), finals, texts, self.settings, self.embedder)
        self.spent(reward=sum(static.tokens))
        keys = [vote_key_of(f) for f in finals]
        agreement = [agreement_score(keys[i], [keys[j] for j in range(len(plans)) if j != i
                                               and problem_id[j] == problem_id[i]]) for i in range(len(plans))]
        return [fused + self.settings.weights.agreement * agreed
                for fused, agreed in zip(static.fused(self.settings.weights), agreement)]


def build(config: VerifierSettings, context: RewardContext) -> CollaborativeReward:
    embedder = None
    if config.weights.similarity:
        from orchrm_dagster.evaluation import MiniLMEmbedder
        from orchrm_dagster.rm import backbone_path

        embedder = MiniLMEmbedder(config.similarity_model or backbone_path(None), config.device, config.max_length)
    return CollaborativeReward(context.rollouts, config, context.margin, embedder)


REWARD = register_reward(RewardKind(
    name="collaborative", description="execute each plan and score its trajectory with the collaborative verifier's "
                                      "panel and its group's agreement",
    config=VerifierSettings, build=build))
