"""Freshness policies of the champion reward model and its scores, as Dagster's daemon evaluates them and the UI
shows them: rm_scores fails its policy once not materialized within the loop resource's `scores_within_s` (a
batch waited longer for the champion's scores), reward_model once no version trained within `champion_within_s`.
`orchrm status` names the same, from the same fields (`orchrm_dagster.loop.loop_report`)."""

from datetime import timedelta

import dagster as dg

from orchrm_dagster.loop import LoopSettings


def freshness_policies(settings: LoopSettings) -> dict[str, dg.FreshnessPolicy]:
    return {"rm_scores": dg.FreshnessPolicy.time_window(fail_window=timedelta(seconds=settings.scores_within_s)),
            "reward_model": dg.FreshnessPolicy.time_window(
                fail_window=timedelta(seconds=settings.champion_within_s))}


def with_freshness(assets: list, settings: LoopSettings) -> list:
    """`assets` with the policies of those that have one."""
    policies = freshness_policies(settings)

    def apply(spec: dg.AssetSpec) -> dg.AssetSpec:
        policy = policies.get(spec.key.to_user_string())
        return dg.apply_freshness_policy(spec, policy) if policy is not None else spec

    return [asset.map_asset_specs(apply) if isinstance(asset, dg.AssetsDefinition) else asset for asset in assets]
