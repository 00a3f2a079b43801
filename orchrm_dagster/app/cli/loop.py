import click

from orchrm_dagster.app.cli.common import console, definitions, print_grpo_rounds
from orchrm_dagster.app.cli.environment import environment_options, in_chosen_environment
from orchrm_dagster.app.cli.options import apply_options, config_options, given
from orchrm_dagster.loop import LoopSettings
from orchrm_dagster.reporting import step_progress

# every setting of a round that decides what it learns and how the gate judges it (GRPOSettings' fields)
ROUND_FLAGS = ("method", "rewards", "reward_weights", "start", "policy", "benchmark", "steps", "train_problems",
               "group_size", "learning_rate", "lr_scheduler", "kl_beta", "clip_epsilon", "temperature",
               "max_completion_tokens", "max_agents", "grammar", "lora", "lora_rank", "device", "precision", "seed",
               "heldout_problems", "heldout_samples", "heldout_temperature", "heldout_max_failed", "policy_gate",
               "accuracy_margin", "gate_confidence", "reward_hacking_share", "policy_margin", "reward_model")
LOOP_FLAGS = ("token_budget", "retrain_on", "retrain_min_new_pairs", "staleness_margin", "staleness_level",
              "staleness_min_pairs", "retrain_defer_s", "rollouts", "rollout_samples", "rollout_seed", "rollout_base",
              "max_attempts", "batching.interval_s", "reward_model.start_from", "reward_model.replay_ratio")


@click.command(name="loop")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="GRPO rounds to run now: the loop goes on until it has run this many more.")
@config_options(LoopSettings, *(f"round.{name}" for name in ROUND_FLAGS), *LOOP_FLAGS,
                flags={"batching.interval_s": "--batching-interval-s", "reward_model.start_from": "--rm-start-from",
                       "reward_model.replay_ratio": "--rm-replay-ratio"}, defaults_from="the loop resource")
@environment_options
@click.pass_context
def command(ctx: click.Context, rounds: int, **_) -> None:
    """The loop that keeps learning, as the daemon runs it: the same decisions and the same runs as the loop's
    sensors (ingest what landed, rebuild pairs, retrain the reward model when its champion is stale, score,
    roll out the last promoted checkpoint while the champion is stale, start the next GRPO round), run here in-process until ROUNDS more rounds
    are done; then the rounds table."""
    from orchrm_dagster.app.loop import LoopFailed, drive
    from orchrm_dagster.loop import rounds as finished_rounds

    defs = definitions()
    root = defs.resources["storage"].storage_root()
    before = len(finished_rounds(root))
    chosen = given(ctx, LoopSettings)
    # the configured weights belong to the configured rewards
    weights = {"round.reward_weights": ()} if "round.rewards" in chosen and "round.reward_weights" not in chosen else {}
    loop = apply_options(defs.resources["loop"].to_engine(), ctx, rounds=before + rounds, **weights)
    loop = in_chosen_environment(loop, ctx)
    with step_progress(console, total=rounds) as progress:

        def on_step(step) -> None:
            progress.step(f"{step.kind}: {step.key} ({step.why})"
                          + (f", attempt {step.attempt + 1}" if step.attempt else ""))

        def on_decision(decision) -> None:
            progress.finish()
            done = len(finished_rounds(root)) - before
            if done > progress.completed:
                progress.note(f"{done} of {rounds} rounds done")
                progress.advance(done - progress.completed)
            for key, cause in decision.failed:
                progress.note(f"gave up on {key}: {cause}")

        try:
            decision = drive(defs, loop, on_step=on_step, on_decision=on_decision, on_log=progress.update)
        except LoopFailed as err:
            raise click.ClickException(str(err)) from err
    console.print(f"the loop stopped: {decision.stopped}", soft_wrap=True)
    print_grpo_rounds()
