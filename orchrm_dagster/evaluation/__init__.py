"""Best-of-N evaluation over logged runs: the reward model and every baseline choosing among N candidates, their
expected accuracy on held-out problems and what each costs in tokens.

Names load lazily (`orchrm_dagster.lazy_names`)."""

from __future__ import annotations

from orchrm_dagster.lazy_names import lazy_names

_EXPORTS = {
    "AT_N_HEADERS": "costs",
    "RATIO_HEADERS": "costs",
    "at_largest_n": "costs",
    "ratio_table_rows": "costs",
    "total_tokens": "costs",
    "verification_ratios": "costs",
    "any_correct_probability": "expectation",
    "candidate_sets": "expectation",
    "pick_probability": "expectation",
    "JudgeCall": "judges",
    "Verdict": "judges",
    "choice_grammar": "judges",
    "judge_key": "judges",
    "parse_choice": "judges",
    "run_judges": "judges",
    "EvaluationMethod": "methods",
    "MethodKind": "methods",
    "method_named": "methods",
    "method_names": "methods",
    "register_method": "methods",
    "registered_methods": "methods",
    "candidate_pool": "pools",
    "index_pool": "pools",
    "trajectories": "pools",
    "vote_key": "pools",
    "vote_key_of": "pools",
    "EvaluationOutcome": "run",
    "bootstrap_interval": "run",
    "evaluate": "run",
    "EvaluationSettings": "settings",
    "JudgeSettings": "settings",
    "VerifierSettings": "settings",
    "VerifierWeights": "settings",
    "MiniLMEmbedder": "verifier",
    "StaticScores": "verifier",
    "agreement_score": "verifier",
    "format_score": "verifier",
    "length_score": "verifier",
    "repetition_score": "verifier",
    "static_scores": "verifier",
    "steps_score": "verifier",
}
__getattr__, __dir__, __all__ = lazy_names(__name__, _EXPORTS)
