"""What a method costs, read from the evaluation's rows: its honest token total, and how many times OrchRM's
verification tokens the trajectory judge spends (the paper's comparison: 142.80M vs 2.38M on AIME, 60x)."""

from __future__ import annotations

from collections.abc import Sequence

REFERENCE = "orchrm_bon"
FULL_JUDGE = "trajectory_judge"
TRUNCATED_JUDGE = "trajectory_judge_truncated"
RATIO_HEADERS = ("benchmark", "policy", "N", f"{REFERENCE} verification tokens",
                 f"{FULL_JUDGE} (full) verification tokens", "full / orchrm", f"{TRUNCATED_JUDGE} / orchrm")


def total_tokens(row: dict) -> float:
    """Verification + generation (all N sampled plans) + execution tokens per problem. A row written before
    generation_tokens existed counts its executed runs' orchestrator tokens in execution_tokens, so no generation is
    added."""
    return row["verification_tokens"] + (row.get("generation_tokens") or 0.0) + row["execution_tokens"]


AT_N_HEADERS = ("benchmark", "policy", "method", "N", "accuracy", "95% CI", "problems", "verification tokens",
                "generation tokens", "execution tokens", "total tokens")


def at_largest_n(rows: Sequence[dict]) -> tuple[int | None, list[tuple]]:
    """The evaluation's summary table (the UI's `at_n_<N>` and the CLI's) and the largest N evaluated: each
    (benchmark, policy, method) at the largest N it was evaluated at (the one-sample baseline at its N = 1, a group
    with too few runs for the largest N at the N it had), under AT_N_HEADERS, accuracy and its interval to 3 places,
    tokens per problem as whole numbers."""
    largest = max((r["n"] for r in rows), default=None)
    widest: dict[tuple, dict] = {}
    for r in rows:
        key = (r["benchmark"], r["policy"], r["method"])
        if key not in widest or r["n"] > widest[key]["n"]:
            widest[key] = r
    table = [(r["benchmark"], r["policy"], r["method"], r["n"], round(r["accuracy"], 3),
              f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]", r["n_problems"], round(r["verification_tokens"]),
              round(r["generation_tokens"] or 0), round(r["execution_tokens"]), round(total_tokens(r)))
             for r in widest.values()]
    return largest, table


def verification_ratios(rows: Sequence[dict]) -> list[dict]:
    """For each (benchmark, policy, N > 1) where both the full trajectory judge and orchrm_bon were evaluated: their
    verification tokens per problem and the ratio judge / OrchRM (None where OrchRM spent none), and the same ratio
    for the truncated judge where it was evaluated too."""
    tokens = {(r["benchmark"], r["policy"], r["n"], r["method"]): r["verification_tokens"] for r in rows}
    ratios = []
    for benchmark, policy, n, method in sorted(tokens):
        if method != REFERENCE or n < 2 or (benchmark, policy, n, FULL_JUDGE) not in tokens:
            continue
        reference = tokens[(benchmark, policy, n, REFERENCE)]
        full = tokens[(benchmark, policy, n, FULL_JUDGE)]
        truncated = tokens.get((benchmark, policy, n, TRUNCATED_JUDGE))
        ratios.append({"benchmark": benchmark, "policy": policy, "n": n, "orchrm_tokens": reference,
                       "judge_tokens": full, "full_ratio": _ratio(full, reference),
                       "truncated_ratio": None if truncated is None else _ratio(truncated, reference)})
    return ratios


def ratio_table_rows(ratios: Sequence[dict]) -> list[tuple]:
    """`verification_ratios` as rows under RATIO_HEADERS ("-": not evaluated, or OrchRM spent no tokens)."""
    return [(r["benchmark"], r["policy"], r["n"], round(r["orchrm_tokens"]), round(r["judge_tokens"]),
             _times(r["full_ratio"]), _times(r["truncated_ratio"])) for r in ratios]


def _ratio(tokens: float, reference: float) -> float | None:
    return tokens / reference if reference > 0 else None


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.1f}x"
