import click

from orchrm_dagster.app.cli.common import console, definitions, print_evaluation
from orchrm_dagster.app.cli.options import apply_options, config_options
from orchrm_dagster.evaluation import EvaluationSettings
from orchrm_dagster.reporting import step_progress


class _MethodsListed(click.Command):
    """Its help ends with every registered method, a line each, read from the registry when help is shown."""

    def format_epilog(self, ctx, formatter) -> None:
        from orchrm_dagster.evaluation import registered_methods

        lines = [f"  {m.name}: {m.description} [executes {'all N' if m.executes_all else 'one'}"
                 f"{'; needs an LLM backend' if m.needs_llm else ''}]" for m in registered_methods().values()]
        self.epilog = "\b\nMethods:\n" + "\n".join(lines)  # \b: click keeps the lines as they are
        super().format_epilog(ctx, formatter)


@click.command(name="evaluate", cls=_MethodsListed)
@config_options(EvaluationSettings, "benchmarks", "policies", "methods", "ns", "judge.draws", "judge.ns",
                flags={"benchmarks": "--benchmark", "policies": "--policy", "ns": "--n",
                       "judge.draws": "--judge-draws", "judge.ns": "--judge-n"})
@click.pass_context
def command(ctx: click.Context, **_) -> None:
    """Best-of-N on held-out problems: materialize `evaluation` and print its table and where its plots are."""
    import dagster as dg

    from assets.config_bridge import from_engine
    from assets.run_configs import EvaluationConfig
    from orchrm_dagster.app.commands import materialization_metadata
    from orchrm_dagster.app.main_job import materialize_or_fail

    from orchrm_dagster.settings import load_settings

    settings = apply_options(load_settings().evaluation, ctx)
    run_config = dg.RunConfig(ops={"evaluation": from_engine(EvaluationConfig, settings)})
    with step_progress(console) as progress:
        progress.step("evaluating Best-of-N on the held-out runs")
        result = materialize_or_fail(definitions(), 'key:"evaluation"', run_config)
    metadata = materialization_metadata(result, "evaluation")
    print_evaluation(metadata["evaluation_id"])
    if metadata.get("notes", "none") != "none":  # what was left out, and why
        console.print(str(metadata["notes"]), soft_wrap=True)
    for name in ("accuracy_vs_n_file", "accuracy_vs_tokens_file"):
        if name in metadata:
            console.print(f"{name.removesuffix('_file').replace('_', ' ')}: {metadata[name]}", soft_wrap=True)
