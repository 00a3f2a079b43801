"""The Dagster UI, served by `dagster dev -w workspace.yaml` as the README says, shows the asset graph in a real
browser (Debian's Chromium driven by Playwright; `make browser` installs it)."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import free_port, wait_until_serving

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("ORCHRM_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps trying to reach Google's hosts, which this network refuses.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
GROUPS = ["ingestion", "labels", "orchestration", "reward_model", "evaluation", "grpo"]
ASSETS = ["problems", "runs", "subagent_calls", "quarantine", "labels", "orchestration_samples", "execution_artifacts",
          "pairs", "reward_model", "rm_scores", "plan_scores", "evaluation", "grpo_round"]




@pytest.fixture()
def dagster_ui(tmp_path):
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home"), "ORCHRM_STORAGE": str(tmp_path / "storage")}
    from orchrm_dagster.app.instance import ensure_dagster_home

    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    ensure_dagster_home()  # as `orchrm ui` does: the instance's dagster.yaml (newsletter dialog off)
    dagster = Path(sys.executable).with_name("dagster")
    log = open(tmp_path / "dagster_dev.log", "w")
    server = subprocess.Popen([str(dagster), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/server_info", server, "dagster dev")
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()


def no_welcome_dialog(page, heading: str) -> None:
    """The instance's `nux` setting is off: no newsletter dialog covers the page of a fresh instance."""
    expect(page.get_by_text(heading, exact=True).first).to_be_visible(timeout=120_000)
    page.wait_for_timeout(2000)  # the dialog, when on, opens a moment after the page
    expect(page.get_by_role("button", name="Skip")).to_have_count(0)


@pytest.fixture()
def page():
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM), f"{CHROMIUM} not found: run `make browser` (Debian's chromium package)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1600, "height": 1000})
        finally:
            browser.close()


def test_the_ui_shows_the_asset_graph_and_catalog(dagster_ui, page, tmp_path):
    page.goto(f"{dagster_ui}/asset-groups", wait_until="domcontentloaded")
    no_welcome_dialog(page, "Global asset lineage")
    for group in GROUPS:  # the lineage graph draws each asset group as a node
        expect(page.get_by_text(group, exact=True).last).to_be_visible(timeout=60_000)
    page.screenshot(path=str(tmp_path / "asset_graph.png"))

    page.goto(f"{dagster_ui}/assets", wait_until="domcontentloaded")  # a full load: still no dialog
    no_welcome_dialog(page, "problems")
    expect(page).to_have_url(re.compile(r"/assets"))
    for asset in ASSETS:  # the catalog lists every asset of the code location with its description
        expect(page.get_by_text(asset, exact=True).first).to_be_visible(timeout=60_000)
    expect(page.get_by_text("Deduplicated win-lose plan pairs").first).to_be_visible()
    page.screenshot(path=str(tmp_path / "asset_catalog.png"))


def test_an_asset_materializes_from_the_ui(dagster_ui, page, tmp_path):
    """The Materialize button launches a run through the daemon's queue; it succeeds and the UI says so."""
    import dagster as dg

    page.goto(f"{dagster_ui}/assets/problems", wait_until="domcontentloaded")
    no_welcome_dialog(page, "problems")
    materialize = page.locator("button", has_text=re.compile(r"^\s*Materialize\s*$")).first  # beside an icon
    materialize.click(timeout=120_000)
    with dg.DagsterInstance.get() as instance:
        runs = _finished_runs(instance, timeout_s=300)
    assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS], [r.run_id for r in runs]
    page.goto(f"{dagster_ui}/runs/{runs[0].run_id}", wait_until="domcontentloaded")
    expect(page.get_by_text("Success").first).to_be_visible(timeout=60_000)
    page.screenshot(path=str(tmp_path / "run.png"))
    tables = list((tmp_path / "storage" / "tables" / "problems").rglob("*.parquet"))
    assert tables, "the run wrote no problems table"


def _finished_runs(instance, timeout_s: float):
    """The runs launched by hand (not by a schedule, such as the nightly evaluation at 03:00, or a sensor), once every
    one has finished."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = [r for r in instance.get_runs()
                if "dagster/schedule_name" not in r.tags and "dagster/sensor_name" not in r.tags]
        if runs and all(r.is_finished for r in runs):
            return runs
        time.sleep(2)
    raise AssertionError(f"no run finished within {timeout_s} s: {[(r.run_id, r.status) for r in instance.get_runs()]}")


@pytest.fixture()
def blocked_root(isolated_env):
    """Built before the UI starts: the example batch ingested, its pairs built, reward model v1 trained on 18 math
    validation pairs (too few: no champion), so the loop is blocked; and rm_scores last materialized longer ago
    than the loop's scores_within_s, so it fails its freshness policy."""
    from click.testing import CliRunner

    import dagster as dg
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID
    from orchrm_dagster.app.cli import main
    from orchrm_dagster.app.instance import cli_instance
    from orchrm_dagster.loop import LoopSettings
    from orchrm_dagster.storage import StorageRoot
    from orchrm_dagster.synthetic import EXAMPLE_BATCH
    from tests.loop_roots import write_reward_model

    for args in (["ingest", str(EXAMPLE_BATCH)], ["materialize", "pairs"]):
        assert CliRunner().invoke(main, args).exit_code == 0
    settings = LoopSettings()
    write_reward_model(StorageRoot(str(isolated_env / "storage")), 1, right=18, validation_pairs={"math": 18},
                       config=settings.reward_model_config())
    scored = DagsterEvent(event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value, job_name=RUNLESS_JOB_NAME,
                          event_specific_data=StepMaterializationData(dg.AssetMaterialization("rm_scores")))
    cli_instance().report_dagster_event(scored, run_id=RUNLESS_RUN_ID,
                                        timestamp=time.time() - settings.scores_within_s - 3600)
    return "blocked: no champion reward model for the math domain: v1 had 18 validation pairs there"


def test_the_loop_sensor_s_tick_says_why_and_late_scores_fail_their_freshness(blocked_root, dagster_ui, page,
                                                                              tmp_path):
    page.goto(f"{dagster_ui}/locations/orchrm/sensors/loop_sensor", wait_until="domcontentloaded")
    no_welcome_dialog(page, "Latest tick")
    skipped = page.get_by_text("0 runs requested", exact=True)  # the latest tick, skipped
    deadline = time.monotonic() + 300  # the daemon's first tick, once it has loaded the code location
    while not skipped.count() and time.monotonic() < deadline:
        page.wait_for_timeout(5000)
        page.reload(wait_until="domcontentloaded")
    skipped.first.hover(timeout=60_000)  # its reason: the loop's decision, whole
    expect(page.get_by_text(re.compile(re.escape(blocked_root))).first).to_be_visible(timeout=60_000)
    page.screenshot(path=str(tmp_path / "loop_sensor_tick.png"))

    page.goto(f"{dagster_ui}/assets/rm_scores", wait_until="domcontentloaded")
    no_welcome_dialog(page, "rm_scores")
    # the policy from the loop's scores_within_s (6 h), failed by the daemon: scored 7 hours ago
    expect(page.get_by_text("Fails if more than 6 hours since last materialization").first).to_be_visible(
        timeout=120_000)
    freshness = page.get_by_text("Freshness policy", exact=True).first.locator("xpath=..")
    expect(freshness.get_by_text("Failed", exact=True)).to_be_visible(timeout=180_000)
    page.screenshot(path=str(tmp_path / "rm_scores_freshness.png"))
