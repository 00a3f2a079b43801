"""The evaluation's summary table, one function for the UI's `at_n_<N>` metadata and the CLI's closing table."""

from orchrm_dagster.evaluation import AT_N_HEADERS, at_largest_n


def _row(policy, method, n, accuracy, tokens):
    return {"benchmark": "gsm8k", "policy": policy, "method": method, "n": n, "accuracy": accuracy,
            "ci_low": accuracy - 0.1, "ci_high": accuracy + 0.1, "n_problems": 12, "verification_tokens": tokens,
            "generation_tokens": None, "execution_tokens": 6089.0}


def test_each_method_at_its_largest_n_rounded_accuracies_and_whole_token_counts():
    rows = [_row("base", "single", 1, 0.5, 0.0), _row("base", "orchrm_bon", 4, 0.6, 400.0),
            _row("base", "orchrm_bon", 8, 0.66666, 812.4), _row("fewshot", "orchrm_bon", 4, 0.75, 400.0),
            _row("fewshot", "oracle", 8, 0.91666, 0.0)]
    largest, table = at_largest_n(rows)
    assert largest == 8
    # the one-sample baseline stays in the table at its N = 1; a group that never reached N = 8 shows its largest
    assert [(r[1], r[2], r[3]) for r in table] == [("base", "single", 1), ("base", "orchrm_bon", 8),
                                                   ("fewshot", "orchrm_bon", 4), ("fewshot", "oracle", 8)]
    first = dict(zip(AT_N_HEADERS, table[1]))
    assert first["accuracy"] == 0.667 and first["95% CI"] == "[0.567, 0.767]"
    assert first["verification tokens"] == 812 and first["generation tokens"] == 0
    assert first["execution tokens"] == 6089 and first["total tokens"] == 6901
    assert all(isinstance(first[name], int) for name in AT_N_HEADERS if name.endswith("tokens"))


def test_no_rows_no_table():
    assert at_largest_n([]) == (None, [])
