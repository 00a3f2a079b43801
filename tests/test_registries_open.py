"""Every extension point is one `Registry`, open to code outside orchrm: an entry named by dotted path in config, or
registered by another distribution's entry point, runs where the package's own entries run. Nothing is installed:
the outside code is a module written into a folder on sys.path, and the entry points a real `*.dist-info` folder
there, which importlib.metadata finds as it finds any installed distribution."""

from __future__ import annotations

import sys
import textwrap

import pytest

from orchrm_dagster.environments import ENVIRONMENTS, PlanJob, executor_for
from orchrm_dagster.evaluation.methods import METHODS as EVALUATION_METHODS
from orchrm_dagster.grpo.methods import METHODS as TRAINING_METHODS
from orchrm_dagster.grpo.rewards import REWARDS
from orchrm_dagster.labels.labeler import LABELERS
from orchrm_dagster.llm.registry import BACKENDS
from orchrm_dagster.registry import Registry
from orchrm_dagster.truths import TRUTHS
from tests.evaluation.test_evaluate import evaluated_root  # noqa: F401  (a fixture)

REGISTRIES = {"orchrm.methods": EVALUATION_METHODS, "orchrm.training_methods": TRAINING_METHODS,
              "orchrm.rewards": REWARDS, "orchrm.backends": BACKENDS, "orchrm.labelers": LABELERS,
              "orchrm.environments": ENVIRONMENTS, "orchrm.truths": TRUTHS}

PLAN = """<thinking>one solver</thinking>
<agent><agent_id>1</agent_id><agent_name>CoTAgent</agent_name><agent_description>solve</agent_description>
<required_arguments><agent_input></agent_input></required_arguments></agent>
<edge></edge>"""

REWARD_MODULE = '''
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.grpo.rewards import PlanReward, RewardKind


@engine_config
class PlanLengthSettings:
    per_char: float = Field(default=0.5, description="Reward per character of the plan")


class PlanLengthReward(PlanReward):
    def __init__(self, config, margin):
        super().__init__("plan_length", margin)
        self.config = config

    def raw_rewards(self, plans, **_):
        return [self.config.per_char * len(plan) for plan in plans]


PLAN_LENGTH = RewardKind(name="plan_length", description="half a point per character", config=PlanLengthSettings,
                         build=lambda config, context: PlanLengthReward(config, context.margin))
NOT_A_REWARD = len
'''

METHOD_MODULE = """
from tests.evaluation.test_registry import LOWEST_RUN_ID  # an EvaluationMethod defined outside orchrm
"""

BACKEND_MODULE = '''
from typing import ClassVar, Literal

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm import Completion


class EchoBackend:
    name = "echo"
    batches_in_process = False

    def __init__(self, prefix):
        self.model_id = "echo"
        self.prefix = prefix

    def generate(self, requests):
        return [Completion(self.prefix + [m for m in r.messages if m["role"] == "user"][-1]["content"], 1, 1)
                for r in requests]


@engine_config
class EchoSpec:
    kind: Literal["outside_echo"] = Field(default="outside_echo", kw_only=True, description="The backend kind")
    prefix: str = Field(default="heard: ", description="Put before every echo")

    loads_model_folders: ClassVar[bool] = False

    def build(self):
        return EchoBackend(self.prefix)
'''

LABELER_MODULE = """
from tests.labels.test_registry import YesNoLabeler  # a Labeler defined outside orchrm

YES_NO = YesNoLabeler()
"""

TRUTH_MODULE = '''
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.truths import TruthFunction, register_truth


@engine_config
class AlwaysSettings:
    chance: float = Field(default=1.0, description="The chance of a correct answer, whatever the plan")


register_truth(TruthFunction(name="always", description="every plan answers correctly",
                             config=AlwaysSettings, probability=lambda config, plan: config.chance))
'''


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """Writes modules into a folder on sys.path (`outside(name, source)`); every registry forgets what the test
    registered, and the modules are forgotten, after the test."""
    for registry in REGISTRIES.values():
        monkeypatch.setattr(registry, "_entries", dict(registry.all()))
        monkeypatch.setattr(registry, "_paths", dict(registry._paths))
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(name: str, source: str) -> str:
        """Module `name` (`package.module`: the package is made too) holding `source`."""
        package, _, module = name.rpartition(".")
        folder = tmp_path.joinpath(*package.split(".")) if package else tmp_path
        folder.mkdir(parents=True, exist_ok=True)
        if package:
            (folder / "__init__.py").touch()
        (folder / f"{module}.py").write_text(textwrap.dedent(source))
        written.extend([name, package])
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def reward_context():
    from orchrm_dagster.grpo import RewardContext, Rollouts
    from orchrm_dagster.orchestration import ExecutionSettings

    from .grpo.test_rewards_and_store import LengthScorer
    from .orchestration.test_sampling_and_execution import ScriptedBackend

    rollouts = Rollouts(executor_for(ExecutionSettings(concurrent_plans=2), lambda: ScriptedBackend()))
    return RewardContext(LengthScorer(), rollouts, "cpu", margin=1.0)


def rewarded(settings, plans):
    """The round's reward step (`build_rewards`, what the grpo method hands TRL) on `plans` of one problem: each
    reward's values and the means it logs on its own scale."""
    from orchrm_dagster.grpo import build_rewards

    logged, values = {}, {}
    columns = {"question": ["q"] * len(plans), "answer": ["18"] * len(plans), "answer_type": ["math"] * len(plans),
               "problem_id": ["p"] * len(plans)}
    for reward in build_rewards(settings, reward_context()):
        values[reward.__name__] = reward(prompts=[None] * len(plans), completions=plans, log_metric=logged.__setitem__,
                                         **columns)
    return values, logged


def test_a_grpo_reward_named_by_dotted_path_runs_in_the_rounds_reward_step(outside):
    from orchrm_dagster.grpo import GRPOSettings

    module = outside("outside_plugins.reward", REWARD_MODULE)
    plans = [PLAN, PLAN + "  ", "not a plan"]
    for path in (f"{module}:PLAN_LENGTH", f"{module}.PLAN_LENGTH"):  # ours, and TRL's form
        settings = GRPOSettings(rewards=("orchrm", path))
        assert settings.rewards == ("orchrm", path) and settings.reward_label == f"orchrm+{path}"
        values, logged = rewarded(settings, plans)
        assert set(values) == {"orchrm", "plan_length"}
        longer, shorter, unparseable = values["plan_length"]
        assert longer < shorter and unparseable < longer  # the rule ranks a plan that does not parse last
        # its own scale, with its settings' defaults (no section of the round's settings names it)
        assert logged["raw/plan_length"] == pytest.approx(0.5 * (len(PLAN) + len(PLAN) + 2 + len(PLAN) - 1) / 3)
    assert REWARDS.named(f"{module}:PLAN_LENGTH") is REWARDS.named("plan_length")  # registered under its name


def test_a_best_of_n_method_named_by_dotted_path_is_evaluated(outside, evaluated_root):
    from orchrm_dagster.evaluation import EvaluationSettings, evaluate

    from .evaluation.test_evaluate import NO_SIMILARITY
    from .evaluation.test_registry import first_run_accuracy

    root, records, seen = evaluated_root
    path = outside("outside_plugins.method", METHOD_MODULE) + ":LOWEST_RUN_ID"
    outcome = evaluate(root, EvaluationSettings(methods=("single", path), ns=(1, 8), verifier=NO_SIMILARITY))
    at = {(r["method"], r["n"]): r for r in outcome.rows}
    assert set(at) == {("single", 1), ("lowest_run_id", 1), ("lowest_run_id", 8)}
    assert at[("lowest_run_id", 8)]["accuracy"] == pytest.approx(first_run_accuracy(records, seen))


def test_an_llm_backend_named_by_dotted_path_executes_plans_and_serves_a_policy(outside):
    from orchrm_dagster.llm import LLMSettings, TransformersSpec, build_backend, spec_class
    from orchrm_dagster.orchestration import ExecutionSettings, PolicySpec

    path = outside("outside_plugins.backend", BACKEND_MODULE) + ":EchoSpec"
    spec = LLMSettings(backend={"kind": path, "prefix": "heard: "}).backend
    assert spec.kind == "outside_echo" and spec_class("outside_echo") is spec_class(path) is type(spec)
    backend = build_backend(spec)
    jobs = [PlanJob(f"What is {i} + {i}?", PLAN, "math", seed=i) for i in range(2)]
    results = executor_for(ExecutionSettings(concurrent_plans=2), lambda: backend).execute(jobs)
    assert all(r.error is None and r.final_answer.startswith("heard: ") for r in results)
    assert all(f"What is {i} + {i}?" in r.final_answer for i, r in enumerate(results))
    policy = PolicySpec(name="p", backend_kind=path)  # a policy sampled from the outside backend
    assert policy.backend_spec(TransformersSpec()) == type(spec)()
    assert LLMSettings(backend=spec).backend is spec  # an instance of a kind the config union was made without


def test_a_labeler_named_by_dotted_path_labels_the_benchmark_it_is_configured_for(outside):
    from orchrm_dagster.labels import LabelSettings, answer_type_for, label_answer, labeler_for
    from orchrm_dagster.labels.batch import LabelReport, _label_run

    path = outside("outside_plugins.labeler", LABELER_MODULE) + ":YES_NO"
    settings = LabelSettings(answer_types={"custom_bool": path})
    assert labeler_for(path) is labeler_for("yesno") and answer_type_for("boolq_dev", "yes", None) == "yesno"
    verdict = label_answer("yesno", "Yes", "<answer>I think yes.</answer>")
    assert (verdict.is_correct, verdict.labeler, verdict.labeler_version) == (True, "yes_no", "test1")
    run = {"run_id": "r", "problem_id": "x", "benchmark": "custom_bool", "reference_answer": "no",
           "final_answer": "It is yes", "error": None, "is_correct": None}
    row = _label_run(run, "b", {}, settings, LabelReport("b"))
    assert (row["answer_type"], row["labeler"], row["is_correct"]) == ("yesno", "yes_no", False)


def test_entry_points_of_an_installed_distribution_add_entries(outside, tmp_path, monkeypatch):
    """A distribution's entry points, in a real dist-info folder on sys.path: one names the entry itself, one a
    module that registers its entry on import."""
    from orchrm_dagster.grpo import GRPOSettings, reward_kinds
    from orchrm_dagster.orchestration import ExecutionSettings
    from orchrm_dagster.truths import truth_named, truths

    outside("outside_plugins.ep_reward", REWARD_MODULE)
    outside("outside_plugins.ep_truth", TRUTH_MODULE)
    dist = tmp_path / "orchrm_outside-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: orchrm-outside\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[orchrm.rewards]\nplan_length = outside_plugins.ep_reward:PLAN_LENGTH\n\n"
                                           "[orchrm.truths]\nalways = outside_plugins.ep_truth\n")
    for registry in (REWARDS, TRUTHS):  # as in a process started after installing
        monkeypatch.setattr(registry, "_entry_points_loaded", False)
        monkeypatch.setattr(registry, "_loaded", False)

    assert "plan_length" in reward_kinds() and "always" in truths()
    values, logged = rewarded(GRPOSettings(rewards=("plan_length",)), [PLAN, "not a plan"])
    assert values["plan_length"][0] > values["plan_length"][1] and "raw/plan_length" in logged
    assert truth_named("always").name == "always"
    simulated = ExecutionSettings().in_environment("simulated", "always")
    jobs = [PlanJob("What is 6 x 7?", PLAN, "math", seed, reference="42") for seed in range(4)]
    results = executor_for(simulated, lambda: None).execute(jobs)
    assert [r.final_answer for r in results] == ["<answer>42</answer>"] * 4


def test_a_broken_entry_point_says_which_and_why(tmp_path, monkeypatch):
    dist = tmp_path / "orchrm_broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: orchrm-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[orchrm.test_widgets]\nwidget = no_such_module_anywhere:WIDGET\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    widgets = Registry("widget", "orchrm_dagster.truths", group="orchrm.test_widgets", skip=("base",))
    with pytest.raises(ValueError, match=r"widget entry point 'widget' = 'no_such_module_anywhere:WIDGET' \(group "
                                         r"orchrm.test_widgets, distribution orchrm-broken\) does not load: "
                                         r"ModuleNotFoundError"):
        widgets.all()


@pytest.mark.parametrize("group", list(REGISTRIES))
def test_each_registry_has_its_group_and_refuses_an_unknown_name_naming_the_known_ones(group):
    registry = REGISTRIES[group]
    assert registry.group == group and registry.names()
    with pytest.raises(ValueError) as refused:
        registry.named("no_such_entry")
    assert f"unknown {registry.what} 'no_such_entry'; known: {', '.join(registry.names())}" in str(refused.value)


def test_a_dotted_path_that_does_not_resolve_says_which_path_and_why(outside):
    from orchrm_dagster.grpo import GRPOSettings

    outside("outside_plugins.broken", "raise RuntimeError('the plugin is broken')\n")
    module = outside("outside_plugins.reward_too", REWARD_MODULE)
    cases = {"no_such_pkg.mod:REWARD": "'no_such_pkg.mod:REWARD' does not import: ModuleNotFoundError: No module "
                                       "named 'no_such_pkg'",
             "outside_plugins.broken:REWARD": "'outside_plugins.broken:REWARD' does not import: RuntimeError: the "
                                              "plugin is broken",
             f"{module}.MISSING": f"does not import: AttributeError: module '{module}' has no attribute 'MISSING'",
             f"{module}:MISSING": "does not import: AttributeError",
             f"{module}:NOT_A_REWARD": f"GRPO reward '{module}:NOT_A_REWARD' names no GRPO reward: "
                                       f"builtin_function_or_method is not a RewardKind, which every GRPO reward is",
             "json.decoder": "GRPO reward 'json.decoder' is a module registering 0 GRPO rewards (none); name one "
                             "as module:attribute"}
    for path, said in cases.items():
        with pytest.raises(ValueError) as refused:
            GRPOSettings(rewards=("orchrm", path))
        assert said in str(refused.value), str(refused.value)


def test_a_module_registering_one_entry_may_be_named_by_its_path(outside):
    from orchrm_dagster.orchestration import ExecutionSettings
    from orchrm_dagster.truths import truth_named

    module = outside("outside_plugins.truth", TRUTH_MODULE)
    assert truth_named(module).name == "always" and truth_named(module) is truth_named("always")
    execution = ExecutionSettings().in_environment("simulated", module)
    assert execution.environment_settings.simulated.truth == module
    [result] = executor_for(execution, lambda: None).execute([PlanJob("q", PLAN, "math", 0, reference="7")])
    assert result.final_answer == "<answer>7</answer>"
