"""Best-of-N evaluation over logged runs: the reward model and every baseline choosing among N candidates, their
expected accuracy on held-out problems and what each costs in tokens."""

from orchrm_dagster.evaluation.costs import (AT_N_HEADERS, RATIO_HEADERS, at_largest_n, ratio_table_rows,
                                             total_tokens, verification_ratios)
from orchrm_dagster.evaluation.expectation import any_correct_probability, candidate_sets, pick_probability
from orchrm_dagster.evaluation.judges import JudgeCall, Verdict, choice_grammar, judge_key, parse_choice, run_judges
from orchrm_dagster.evaluation.methods import (EvaluationMethod, MethodKind, method_named, method_names,
                                               register_method, registered_methods)
from orchrm_dagster.evaluation.pools import candidate_pool, index_pool, trajectories, vote_key, vote_key_of
from orchrm_dagster.evaluation.run import EvaluationOutcome, bootstrap_interval, evaluate
from orchrm_dagster.evaluation.settings import EvaluationSettings, JudgeSettings, VerifierSettings, VerifierWeights
from orchrm_dagster.evaluation.verifier import (MiniLMEmbedder, StaticScores, agreement_score, format_score,
                                                length_score, repetition_score, static_scores, steps_score)

__all__ = [
    "AT_N_HEADERS", "RATIO_HEADERS", "at_largest_n", "ratio_table_rows", "total_tokens", "verification_ratios",
    "EvaluationMethod", "EvaluationOutcome", "EvaluationSettings", "JudgeCall", "JudgeSettings", "MethodKind",
    "MiniLMEmbedder", "StaticScores", "Verdict", "VerifierSettings", "VerifierWeights", "agreement_score",
    "any_correct_probability", "bootstrap_interval", "candidate_pool", "candidate_sets", "choice_grammar",
    "evaluate", "format_score", "index_pool", "judge_key", "length_score", "method_named", "method_names",
    "parse_choice", "pick_probability", "register_method", "registered_methods", "repetition_score", "run_judges",
    "static_scores", "steps_score", "trajectories", "vote_key", "vote_key_of",
]
