"""The CLI's flags come from the engine configs: each shows its config's default, none restates one by hand, and a
user's mistake prints its message alone (the traceback with --verbose)."""

import importlib
import textwrap

import click
import pytest
from click.testing import CliRunner

from orchrm_dagster.app.cli import COMMANDS, main
from orchrm_dagster.app.cli.options import ConfigOption, apply_options, field_default, field_info
from orchrm_dagster.evaluation import EvaluationSettings

# flags that set no config field: what a command does, not how the engine is configured
COMMAND_ONLY = {("ingest", "files"), ("import-traces", "files"), ("import-traces", "fmt"), ("reingest", "batches"), ("materialize", "selection"),
                ("materialize", "partition_key"), ("materialize", "config_file"), ("query", "statement"),
                ("query", "fmt"), ("status", "fmt"), ("export-pairs", "path"), ("export-pairs", "fmt"), ("export-pairs", "sources"),
                ("export-pairs", "splits"), ("orchestrate", "benchmark"), ("orchestrate", "policy_names"),
                ("orchestrate", "ingest"), ("loop", "rounds"), ("ui", "port")}


def _commands() -> dict[str, click.Command]:
    return {name: importlib.import_module(f"orchrm_dagster.app.cli.{module}").command
            for name, (module, _) in COMMANDS.items()}


def _shown(value) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "every one"
    return "none" if value is None else str(value)


@pytest.mark.parametrize("name, command", sorted(_commands().items()))
def test_each_flag_shows_its_configs_default_and_none_restates_one(name, command):
    for param in command.params:
        if not isinstance(param, ConfigOption):
            assert (name, param.name) in COMMAND_ONLY, f"orchrm {name} {param.opts}: a flag no config field backs"
            continue
        help_text = param.get_help_record(click.Context(command))[1]
        default = field_default(param.config, param.path)
        assert (f"[default: {_shown(default)}" in help_text or "[default: every registered one" in help_text
                or (name, param.name) == ("orchestrate", "best_of")), help_text  # --best-of N turns Best-of-N on
        assert field_info(param.config, param.path).description in help_text
    # left out, a flag changes nothing: the settings a command starts from keep their values
    configs = {p.config for p in command.params if isinstance(p, ConfigOption)}
    ctx = command.make_context(name, []) if configs else None
    for config in configs:
        start = config()
        assert apply_options(start, ctx) == start


@pytest.mark.parametrize("command, flag, shown", [
    ("orchestrate", "--samples", "[default: 2]"), ("evaluate", "--n", "[default: 1,2,4,8]"),
    ("loop", "--rewards", "[default: orchrm (or the loop resource's)]"), ("serve", "--port", "[default: 8000]"),
    ("main", "--policy", "[default: smollm2-fewshot]"), ("loop", "--token-budget", "[default: none (or")])
def test_the_help_shows_each_default_as_a_user_reads_it(command, flag, shown):
    help_text = " ".join(CliRunner().invoke(main, [command, "--help"], terminal_width=400).output.split())
    options = help_text[help_text.index("Options:"):]
    after = options[options.index(f" {flag} "):]
    assert shown in after[:after.index("--", len(flag) + 2)], after[:300]


def test_the_listing_opens_each_commands_own_help():
    for name, command in _commands().items():
        listed = COMMANDS[name][1].removesuffix(".")
        assert " ".join(command.help.split()).startswith(listed), (name, listed)


def test_flags_apply_together_along_their_paths():
    from orchrm_dagster.app.cli.evaluate import command

    ctx = command.make_context("evaluate", ["--n", "1,3", "--judge-n", "3", "--policy", "a", "--policy", "b,c",
                                            "--judge-draws", "5"])
    settings = apply_options(EvaluationSettings(), ctx)
    assert settings.ns == (1, 3) and settings.judge.ns == (3,) and settings.judge.draws == 5  # one check, all set
    assert settings.policies == ("a", "b", "c") and settings.methods == EvaluationSettings().methods
    untouched = apply_options(EvaluationSettings(), command.make_context("evaluate", []))
    assert untouched == EvaluationSettings()


def test_a_registry_flag_takes_a_dotted_path_to_an_entry_outside_the_package(tmp_path, monkeypatch):
    from orchrm_dagster.app.cli.loop import command
    from orchrm_dagster.grpo import reward_kinds
    from orchrm_dagster.grpo.rewards import REWARDS

    monkeypatch.setattr(REWARDS, "_entries", dict(REWARDS.all()))  # the outside entry forgotten after the test
    monkeypatch.setattr(REWARDS, "_paths", dict(REWARDS._paths))
    (tmp_path / "outside_rewards.py").write_text(textwrap.dedent('''
        from orchrm_dagster.grpo.rewards import RewardKind, register_reward
        from orchrm_dagster.grpo.rewards.orchrm import REWARD as ORCHRM

        REWARD = register_reward(RewardKind("outside_cli", "a reward from outside the package", ORCHRM.config,
                                            ORCHRM.build))
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    ctx = command.make_context("loop", ["--rewards", "orchrm,outside_rewards:REWARD"])
    assert ctx.params["rewards"] == (("orchrm", "outside_rewards:REWARD"),)
    assert "outside_cli" in reward_kinds()
    refused = CliRunner().invoke(main, ["loop", "--rewards", "outside_rewards:NOPE"])
    assert refused.exit_code == 2 and "outside_rewards:NOPE" in refused.output


def test_a_mistake_prints_its_message_alone_and_the_traceback_only_when_verbose(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "storage"))
    config = tmp_path / "rc.yaml"
    config.write_text("ops:\n  problems:\n    config:\n      bogus_key: 1\n")
    quiet = CliRunner().invoke(main, ["materialize", "problems", "--config", str(config)])
    assert quiet.exit_code == 1 and 'unexpected config entry "bogus_key"' in quiet.output
    assert "Traceback" not in quiet.output and quiet.output.count("bogus_key") == 1

    bad_value = CliRunner().invoke(main, ["evaluate", "--n", "0"])
    assert bad_value.exit_code == 2 and "ns must hold candidate-set sizes >= 1" in bad_value.output

    verbose = CliRunner().invoke(main, ["--verbose", "loop", "--truth", "debate_sink", "--environment", "agents"])
    assert verbose.exit_code == 2 and "--truth applies to --environment simulated" in verbose.output
    traced = CliRunner().invoke(main, ["--verbose", "materialize", "problems", "--config", str(config)])
    assert traced.exit_code == 1 and type(traced.exception).__name__ == "DagsterInvalidConfigError"
