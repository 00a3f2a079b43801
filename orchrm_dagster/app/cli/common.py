"""What the commands share: the console and its tables, the Definitions and the storage root they work on, and the
summaries more than one command prints."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

console = Console(width=None if sys.stdout.isatty() else 220)  # piped or captured: wide tables, not folded cells


def definitions():
    from orchrm_dagster.definitions import build_definitions

    return build_definitions()  # built now, so --storage / ORCHRM_STORAGE given to this command apply


def storage():
    """The storage settings the Definitions' `storage` resource has (the settings file's `storage`, its root --storage
    or ORCHRM_STORAGE's when given), without building the Definitions."""
    from orchrm_dagster.storage import storage_settings

    return storage_settings()


def print_rows(columns, rows, caption: str | None = None, rounded: bool = True) -> None:
    table = Table(caption=caption, caption_justify="left")
    for name in columns:  # headers are never cut: a cell may fold, a column name may not
        table.add_column(str(name), min_width=len(str(name)))
    for row in rows:
        table.add_row(*(_cell(v, rounded) for v in row))
    console.print(table)


def _cell(value, rounded: bool = True) -> str:
    """A table cell; `rounded`: floats to 3 decimals, a whole one without its `.0` (token counts come back as
    6089.0), as the summary tables show them."""
    if value is None:
        return ""
    if rounded and isinstance(value, float):
        return repr(round(value, 3)).removesuffix(".0")
    return str(value)


def ingest_callbacks(progress) -> dict:
    """ingest_files / ingest_landed callbacks that show each batch as one step, finished with its counts."""

    def done(outcome) -> None:
        if outcome.ok:
            progress.finish(outcome.summary())
        else:
            progress.fail(outcome.summary())
        progress.advance()

    return {"on_start": lambda name: progress.step(f"ingesting {name}"), "on_done": done}


def print_outcomes(outcomes) -> None:
    print_rows(["batch", "runs", "quarantined", "labeled", "correct", "run", "failed files"],
               [[o.batch_id, o.runs, o.quarantined, o.labeled, o.correct, o.status,
                 "; ".join(f"{name}: {cause}" for name, cause in o.failed_files)] for o in outcomes],
               caption="Batches ingested by this command: runs stored, lines quarantined, runs labeled and labeled "
                       "correct; run: the ingest run's result; failed files: those it could not read, and why")


def execution_summary(execution) -> str:
    metadata = execution.metadata
    return (f"{metadata.get('executed')} runs executed ({metadata.get('failed_runs')} failed, "
            f"{metadata.get('runs_per_minute')} runs/min), landed as {metadata.get('landed_batch')}")


def print_evaluation(evaluation_id: str) -> None:
    """The table the UI shows as the evaluation's `at_n_<N>` (one function makes both), captioned."""
    from orchrm_dagster.evaluation import AT_N_HEADERS, at_largest_n

    rows = storage().warehouse().query("select * from evaluation where evaluation_id = $id "
                                       "order by benchmark, policy, method", {"id": evaluation_id}).to_pylist()
    largest, table = at_largest_n(rows)
    if not table:
        console.print("no (benchmark, policy) had enough executed, labeled runs per held-out problem")
        return
    benchmarks = ", ".join(sorted({r["benchmark"] for r in rows}))
    print_rows(AT_N_HEADERS, table,
               caption=f"Best-of-N on held-out problems of {benchmarks}, each method at the largest N it was "
                       f"evaluated at (up to {largest}; single: 1): the accuracy of each way of choosing one of N runs "
                       f"(95% bootstrap interval). Tokens per problem: verification "
                       f"(choosing), generation (sampling the N plans), execution (running the sub-agents).")


# what a terminal has room for, the verdict first (the asset's Markdown table has every column)
ROUNDS_SHOWN = ("round", "verdict", "hacking?", "method", "rewards", "environment", "rm", "accuracy before",
                "accuracy after", "difference", "predicted gain", "failed plans", "held-out reward before",
                "held-out reward after", "total tokens")


def terminal_rounds(rows: list[dict]) -> list[list]:
    """grpo_rounds rows as a terminal shows them: the ROUNDS_SHOWN columns of `rounds_table`."""
    from orchrm_dagster.grpo import rounds_table

    headers, table = rounds_table(rows)
    shown = [headers.index(name) for name in ROUNDS_SHOWN]
    return [[row[i] for i in shown] for row in table]


def print_grpo_rounds() -> None:
    from orchrm_dagster.grpo import read_table

    rows = read_table(storage().storage_root(), "grpo_rounds")
    confidence = f"{rows[-1]['confidence']:.0%}" if rows and rows[-1].get("confidence") else "95%"
    print_rows(ROUNDS_SHOWN, terminal_rounds(rows),
               caption=f"GRPO rounds: held-out accuracy (executed, correct/plans) and reward (champion's mean score) "
                       f"before and after, {confidence} intervals; difference: the interval of accuracy after - before "
                       f"the gate decided on; predicted gain: what the champion's calibration predicts from its "
                       f"scores; failed plans: measured nothing; total tokens: all the round spent (by kind, and "
                       f"the training reward and KL: the grpo_round asset's table). A SIMULATED environment drew "
                       f"correctness from a truth function. Why each verdict: orchrm query \"select round, reason from "
                       f"grpo_rounds\"")


def print_reward_model_summary() -> None:
    # select *: a table written before champions were per domain lacks the domain columns
    rows = storage().warehouse().query("select * from rm_checkpoints order by version").to_pylist()
    table = [(r["version"], ", ".join(r.get("domains") or ()),
              ", ".join(r.get("champion_of") or ()) or ("every domain" if r["is_champion"] else ""),
              r["n_train_pairs"], r["n_validation_pairs"], _rounded(r["val_accuracy"]),
              _by_domain(r.get("val_accuracy_by_domain"))) for r in rows]
    print_rows(["rm version", "domains", "champion of", "train pairs", "validation pairs", "val accuracy",
                "val accuracy by domain"], table,
               caption="Reward-model versions: the pairs each trained and was validated on, and its accuracy on the "
                       "validation pairs (all, and by domain)")
    from orchrm_dagster.rm import champion_refusals

    # scoring, Best-of-N, the rounds and `orchrm serve` refuse these domains until a version beats chance there
    for domain, why in champion_refusals(storage().storage_root()).items():
        console.print(f"[yellow]{domain}: {why}[/yellow]", soft_wrap=True)


def _rounded(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def _by_domain(accuracies: str | None) -> str:
    return ", ".join(f"{domain} {value:.3f}" for domain, value in json.loads(accuracies or "{}").items())
