"""Arrow schemas of every Parquet table: the run tables (the runs the ingest keeps, with their sub-agent calls and
quarantined lines, their labels, the problems they answer, the orchestration samples), the reward-model and policy
tables (pairs built and imported, reward-model checkpoints, their training pairs and scores, GRPO rounds and policy
checkpoints), and the evaluation tables (results, problems, and what methods keep so re-evaluation costs nothing).
The warehouse's catalogue of them is `contract.catalogue`."""

from __future__ import annotations

import pyarrow as pa


# ---- runs

RUNS = pa.schema(
    [
        ("batch_id", pa.string()),
        ("run_id", pa.string()),
        ("problem_id", pa.string()),
        ("benchmark", pa.string()),
        ("question", pa.string()),
        ("policy_name", pa.string()),
        ("policy_kind", pa.string()),
        ("policy_step", pa.int64()),
        ("plan", pa.string()),
        ("plan_hash", pa.string()),
        ("reference_answer", pa.string()),
        ("sample_index", pa.int64()),
        ("final_answer", pa.string()),
        ("n_subagent_calls", pa.int64()),
        ("orchestrator_tokens", pa.int64()),
        ("subagent_tokens", pa.int64()),
        ("orchestrator_prompt_tokens", pa.int64()),
        ("orchestrator_completion_tokens", pa.int64()),
        ("subagent_prompt_tokens", pa.int64()),
        ("subagent_completion_tokens", pa.int64()),
        ("plan_logprob", pa.float64()),
        ("is_correct", pa.bool_()),
        ("error", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("meta", pa.string()),  # JSON text: the record's meta plus any unknown fields
        ("source_file", pa.string()),
        ("line_number", pa.int64()),
        ("environment", pa.string()),  # where the plan was executed: agents (also every file before the column)
    ]
)

SUBAGENT_CALLS = pa.schema(
    [
        ("batch_id", pa.string()),
        ("run_id", pa.string()),
        ("call_index", pa.int64()),
        ("agent_id", pa.string()),
        ("agent_name", pa.string()),
        ("input", pa.string()),
        ("output", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("model", pa.string()),
        ("extra", pa.string()),  # JSON text of unknown keys of the sub-agent object
        ("line_number", pa.int64()),  # the run's line in its batch file
    ]
)

QUARANTINE = pa.schema(
    [
        ("batch_id", pa.string()),
        ("source_file", pa.string()),
        ("line_number", pa.int64()),
        ("run_id", pa.string()),
        ("field", pa.string()),
        ("kind", pa.string()),  # contract.QuarantineKind
        ("reason", pa.string()),
        ("raw", pa.string()),
        ("raw_truncated", pa.bool_()),
    ]
)

LABELS = pa.schema(
    [
        ("batch_id", pa.string()),
        ("run_id", pa.string()),
        ("problem_id", pa.string()),
        ("benchmark", pa.string()),
        ("answer_type", pa.string()),
        ("reference_answer", pa.string()),
        ("is_correct", pa.bool_()),
        ("extracted_answer", pa.string()),
        ("score", pa.float64()),
        ("labeler", pa.string()),
        ("labeler_version", pa.string()),
        ("reason", pa.string()),
        ("producer_is_correct", pa.bool_()),  # the run's own is_correct, as it came
        # what decided is_correct: reference (a labeler, against the reference answer) | run (the run's own
        # is_correct: its benchmark in LabelSettings.trust_run_labels, no reference). Files from before the column
        # read it as reference (contract.COLUMN_DEFAULTS): only references labeled then.
        ("label_source", pa.string()),
        # the run's plan parses (plans.parse_plan); best-of-N ranks one that does not after every one that does.
        # Null in files from before the column: unknown until the batch is labeled again.
        ("plan_parses", pa.bool_()),
    ]
)

PROBLEMS = pa.schema(
    [
        ("problem_id", pa.string()),
        ("benchmark", pa.string()),
        ("split", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("answer_type", pa.string()),
        ("choices", pa.list_(pa.string())),
        ("meta", pa.string()),
        ("source", pa.string()),
    ]
)

ORCHESTRATION_SAMPLES = pa.schema(
    [
        ("run_id", pa.string()),
        ("problem_id", pa.string()),
        ("benchmark", pa.string()),
        ("question", pa.string()),
        ("reference_answer", pa.string()),
        ("answer_type", pa.string()),
        ("policy_name", pa.string()),
        ("policy_kind", pa.string()),
        ("policy_step", pa.int64()),
        ("orchestrator_model", pa.string()),
        ("sample_index", pa.int64()),
        ("seed", pa.int64()),
        ("plan", pa.string()),
        ("plan_logprob", pa.float64()),
        ("plan_parses", pa.bool_()),
        ("plan_error", pa.string()),  # the parse error, or the generation error
        ("plan_error_code", pa.string()),  # plans.PlanError's code when the plan does not parse
        ("plan_error_kind", pa.string()),  # contract.RunErrorKind when the plan cannot be executed
        ("grammar", pa.bool_()),
        ("orchestrator_prompt_tokens", pa.int64()),
        ("orchestrator_completion_tokens", pa.int64()),
        ("choices", pa.list_(pa.string())),  # a multiple-choice problem's options, else null
    ]
)


# ---- reward models and policies

PAIRS = pa.schema(
    [
        ("pair_id", pa.string()),
        ("problem_id", pa.string()),
        ("chosen_run_id", pa.string()),
        ("rejected_run_id", pa.string()),
        ("chosen_plan_hash", pa.string()),
        ("rejected_plan_hash", pa.string()),
        ("source", pa.string()),
        ("split", pa.string()),
    ]
)

# Pairs imported from the published OrchRM format (input, chosen, rejected, source).
IMPORTED_PAIRS = pa.schema(
    [
        ("pair_id", pa.string()),
        ("problem_id", pa.string()),
        ("question", pa.string()),
        ("chosen_plan", pa.string()),
        ("rejected_plan", pa.string()),
        ("chosen_plan_hash", pa.string()),
        ("rejected_plan_hash", pa.string()),
        ("source", pa.string()),
        ("split", pa.string()),
    ]
)

RM_CHECKPOINTS = pa.schema(
    [
        ("version", pa.int64()),
        ("path", pa.string()),
        ("backbone", pa.string()),
        ("n_train_pairs", pa.int64()),
        ("n_validation_pairs", pa.int64()),
        ("val_accuracy", pa.float64()),
        ("champion_val_accuracy", pa.float64()),  # the champion's accuracy on the same validation pairs
        ("ece", pa.float64()),
        ("length_spearman", pa.float64()),
        ("pairs_per_second", pa.float64()),
        ("pair_set_fingerprint", pa.string()),
        ("is_champion", pa.bool_()),  # champion of at least one domain
        ("created_at", pa.string()),
        ("domains", pa.list_(pa.string())),  # the domains it stood for as a champion (what it was trained for)
        ("champion_of", pa.list_(pa.string())),  # the domains whose runs and plans it scores now
        ("val_accuracy_by_domain", pa.string()),  # JSON {domain: accuracy on the domain's validation pairs}
    ]
)

# The pairs a reward-model version trained and validated on, in the order training read them: saved beside its
# checkpoint (checkpoints/rm/v<N>/training_pairs.parquet); the warehouse's `rm_training_pairs` view reads every one.
RM_TRAINING_PAIRS = pa.schema(
    [
        ("version", pa.int64()),
        ("split", pa.string()),  # train | validation
        ("position", pa.int64()),  # the pair's place in its split, as training read it
        ("pair_id", pa.string()),
        ("problem_id", pa.string()),  # null where the trainer was given the texts alone
        ("source", pa.string()),
        ("domain", pa.string()),  # null where not known
        ("question", pa.string()),
        ("chosen_plan", pa.string()),
        ("rejected_plan", pa.string()),
    ]
)
RM_TRAINING_PAIRS_FILE = "training_pairs.parquet"

# The champions' live accuracy, a measure a row (rm.live): how each ranked pairs it never trained on, as they came.
CHAMPION_LIVE_ACCURACY = pa.schema(
    [
        ("measured_at", pa.float64()),  # seconds since the epoch
        ("source", pa.string()),  # pairs (the new batches') | held-out plans of round N
        ("rm_version", pa.int64()),
        ("domain", pa.string()),
        ("pairs", pa.int64()),
        ("correct", pa.int64()),  # pairs it ranked right
        ("problems", pa.int64()),
        ("accuracy", pa.float64()),
        ("low", pa.float64()),  # its 95% interval, problems as clusters
        ("high", pa.float64()),
        ("validation_accuracy", pa.float64()),  # the champion's on its validation pairs of the domain
        ("by_problem", pa.string()),  # JSON [[problem id, right, pairs], ...]
    ]
)

RM_SCORES = pa.schema(
    [
        ("batch_id", pa.string()),
        ("run_id", pa.string()),
        ("rm_version", pa.int64()),
        ("score", pa.float64()),
        ("tokens", pa.int64()),
    ]
)

# What `orchrm export-scores` sent back to the tool an imported run's trace came from, one row per (run, tool,
# destination): the label and the champion's score as last sent, so that the next export sends only what changed.
SCORE_EXPORTS = pa.schema(
    [
        ("run_id", pa.string()),
        ("trace_id", pa.string()),
        ("tool", pa.string()),  # langfuse | langsmith | otel (the run's trace format)
        ("destination", pa.string()),  # the URL posted to, or the folder the files were written to
        ("is_correct", pa.bool_()),  # the label sent (null: none)
        ("rm_version", pa.int64()),  # the champion whose score was sent (null: none)
        ("domain", pa.string()),
        ("score", pa.float64()),
        ("fingerprint", pa.string()),  # of what was sent: a run whose label or score changes is sent again
        ("exported_at", pa.timestamp("us", tz="UTC")),
    ]
)

# The champion's score of each sampled plan, before execution (one folder per (benchmark, policy) partition).
PLAN_SCORES = pa.schema(
    [
        ("run_id", pa.string()),  # the sample's run_id
        ("problem_id", pa.string()),
        ("benchmark", pa.string()),
        ("policy_name", pa.string()),
        ("sample_index", pa.int64()),
        ("plan_hash", pa.string()),
        ("rm_version", pa.int64()),
        ("score", pa.float64()),
        ("tokens", pa.int64()),  # what the reward model read: its verification cost
    ]
)

# Orchestrator policies trained by GRPO rounds: each row is a policy the runner can sample from.
POLICY_CHECKPOINTS = pa.schema(
    [
        ("round", pa.int64()),
        ("name", pa.string()),  # the policy's name (a `policies` partition key)
        ("path", pa.string()),  # the model folder (under <root>/checkpoints/policy/)
        ("base_model", pa.string()),  # what the round started from
        ("reward_mode", pa.string()),
        ("rm_version", pa.int64()),
        ("prompt", pa.string()),  # the orchestrator prompt the policy was trained with
        ("max_agents", pa.int64()),
        ("max_new_tokens", pa.int64()),
        ("created_at", pa.string()),
        ("promoted", pa.bool_()),  # passed the policy gate: it may roll out and start the next round
        ("in_use", pa.bool_()),  # the latest promoted checkpoint: what rolls out and what the next round starts from
    ]
)

# One row per finished GRPO round.
GRPO_ROUNDS = pa.schema(
    [
        ("round", pa.int64()),
        ("policy_checkpoint", pa.string()),  # null: the round trained nothing and published no checkpoint
        ("reward_mode", pa.string()),  # what trained it: GRPO's rewards, "pairs" (dpo), "trajectory" (rft)
        ("rm_version", pa.int64()),
        ("steps", pa.int64()),
        ("mean_reward", pa.float64()),
        ("kl", pa.float64()),
        ("generation_tokens", pa.int64()),  # tokens the policy generated while training
        ("reward_tokens", pa.int64()),  # tokens the reward model (or panel, or judge) read
        ("rollout_tokens", pa.int64()),  # sub-agent tokens spent executing plans for rewards
        ("heldout_reward_before", pa.float64()),  # the champion's mean score of held-out plans, previous policy
        ("heldout_reward_after", pa.float64()),  # the same, the new policy (same problems and seeds)
        ("heldout_accuracy", pa.float64()),  # correctness of the new policy's held-out plans, executed
        ("seconds", pa.float64()),
        ("start_policy", pa.string()),  # the policy the round trained from (the last promoted one)
        ("heldout_accuracy_before", pa.float64()),  # the same correctness, the starting policy
        ("promoted", pa.bool_()),  # the policy gate's verdict
        ("reason", pa.string()),  # why it was (not) promoted
        ("method", pa.string()),  # how the round trained the policy (grpo/methods/: grpo, dpo, rft)
        ("training_tokens", pa.int64()),  # tokens the trainer read in forward passes (prompt + completion, per epoch)
        # The policy gate (grpo/gate.py): where held-out plans executed, what the verdict was decided on, the verdict
        ("environment", pa.string()),  # agents | simulated (correctness drawn from a truth function: say so)
        ("truth", pa.string()),  # a simulated environment's truth function and its parameters (null: real agents)
        ("gate", pa.string()),  # accuracy (measured held-out accuracy decided) | reward_only (asked for by config)
        ("verdict", pa.string()),  # promoted | rejected | undecided | unverified | untrained
        ("reward_hacking", pa.bool_()),  # reward rose past the threshold while accuracy did not: rejected
        ("confidence", pa.float64()),  # of every interval in the row (two-sided)
        ("heldout_plans_before", pa.int64()),  # held-out plans measured, each side
        ("heldout_plans_after", pa.int64()),
        ("heldout_correct_before", pa.int64()),  # of them answered correctly when executed (null: not executed)
        ("heldout_correct_after", pa.int64()),
        ("heldout_accuracy_low_before", pa.float64()),  # Wilson score intervals of each side's accuracy
        ("heldout_accuracy_high_before", pa.float64()),
        ("heldout_accuracy_low_after", pa.float64()),
        ("heldout_accuracy_high_after", pa.float64()),
        ("accuracy_difference_low", pa.float64()),  # interval of accuracy after - before (difference_method)
        ("accuracy_difference_high", pa.float64()),
        ("heldout_reward_std_before", pa.float64()),  # spread of the per-plan held-out rewards
        ("heldout_reward_std_after", pa.float64()),
        ("heldout_reward_low_before", pa.float64()),  # Student's t intervals of each side's mean held-out reward
        ("heldout_reward_high_before", pa.float64()),
        ("heldout_reward_low_after", pa.float64()),
        ("heldout_reward_high_after", pa.float64()),
        ("seconds_by_phase", pa.string()),  # JSON: where the round's seconds went (grpo/profile.py), each phase's own
        # What shaped each side's held-out plans (grpo.round.held_out_key): a side is reused only under the same key
        ("heldout_key_before", pa.string()),
        ("heldout_key_after", pa.string()),
        ("heldout_failed_before", pa.int64()),  # held-out plans whose decoding, execution or scoring failed
        ("heldout_failed_after", pa.int64()),
        ("heldout_failure_before", pa.string()),  # the first failure's cause (null: none failed)
        ("heldout_failure_after", pa.string()),
        # the accuracy the champion's calibration predicts from its scores of each side's plans (null: no calibration)
        ("heldout_predicted_accuracy_before", pa.float64()),
        ("heldout_predicted_accuracy_after", pa.float64()),
        ("calibration", pa.string()),  # JSON: the champion's calibration the predictions came from (rm.calibration)
        # the gate's own cost: held-out plans sampled (prompt and completion), executed and scored, and the scoring
        # of the runs the calibration was fitted on (a reused side costs nothing)
        ("heldout_tokens", pa.int64()),
        # What the round started on (grpo.barrier), each batch as `batch_id@generation` of its runs: the batches whose
        # pairs the champion (rm_version) trained on (null: not recorded for that version), and those the last
        # promoted round's rollouts landed (null: no such round). The loop starts a round once the latter are in the
        # pairs and, where they made a retraining due, trained on: by the first version whose pairs held them all
        # (`rollouts_trained_by`; the champion, or a challenger its gate turned down; null: no retraining was due).
        ("rm_batches", pa.list_(pa.string())),
        ("rollout_batches", pa.list_(pa.string())),
        ("rollouts_trained_by", pa.int64()),
        # The gate's statistics (issue 55): how the difference's interval was computed (paired: over per-problem
        # differences; newcombe: two independent proportions, a side recorded without its problems' counts)
        ("difference_method", pa.string()),
        # JSON {problem_id: [correct, plans, mean held-out reward]} of each side: what the paired interval reads
        ("heldout_by_problem_before", pa.string()),
        ("heldout_by_problem_after", pa.string()),
        # what the accuracy depends on besides the policy (grpo.heldout.accuracy_key): sides under one key compare
        ("heldout_accuracy_key", pa.string()),
        ("hacking_flag", pa.string()),  # "on: ..." (what it checked) | "on: suspected ..." | "off: <why>"
        # the best accuracy of a policy ever in use, measured under the same accuracy key, when not the start's: the
        # round is held against it too (no ratchet down)
        ("best_policy", pa.string()),
        ("best_accuracy", pa.float64()),
        ("best_difference_low", pa.float64()),
        ("best_difference_high", pa.float64()),
        ("attempt", pa.string()),  # the attempt that committed the row (its tokens' journal: orchrm_dagster.spending)
    ]
)


# ---- evaluations

# One row per (benchmark, policy, method, N) of an evaluation; appended per evaluation.
EVALUATION = pa.schema(
    [
        ("evaluation_id", pa.string()),
        ("benchmark", pa.string()),
        ("policy", pa.string()),
        ("method", pa.string()),
        ("n", pa.int64()),
        ("accuracy", pa.float64()),  # expected correctness of the chosen run, averaged over problems
        ("ci_low", pa.float64()),  # 95% bootstrap interval over problems
        ("ci_high", pa.float64()),
        ("n_problems", pa.int64()),
        ("verification_tokens", pa.float64()),  # mean per problem, as if the method ran alone
        # mean per problem: sub-agent tokens of the executed runs (in rows without generation_tokens, written before
        # it existed: orchestrator + sub-agent tokens of the executed runs, so unexecuted plans went uncounted)
        ("execution_tokens", pa.float64()),
        ("rm_version", pa.int64()),  # the champion of the benchmark's domain
        ("created_at", pa.string()),
        # mean per problem: orchestrator tokens of all N sampled plans, executed or not. The honest cost of a method
        # is verification + generation + execution tokens.
        ("generation_tokens", pa.float64()),
    ]
)

EVALUATION_PROBLEMS = pa.schema(
    [
        ("evaluation_id", pa.string()),
        ("benchmark", pa.string()),
        ("policy", pa.string()),
        ("problem_id", pa.string()),
    ]
)

# The collaborative verifier's partial score of each trajectory (agreement against the problem's whole pool).
VERIFIER_SCORES = pa.schema(
    [
        ("evaluation_id", pa.string()),
        ("run_id", pa.string()),
        ("problem_id", pa.string()),
        ("agreement", pa.float64()),
        ("format", pa.float64()),
        ("steps", pa.float64()),
        ("length", pa.float64()),
        ("repetition", pa.float64()),
        ("similarity", pa.float64()),
        ("fused", pa.float64()),  # by the fixed weights
        ("tokens", pa.int64()),  # what the panel's embedding model read
        ("rank", pa.float64()),  # share of pairwise comparisons won against the rest of the pool
        ("fitted", pa.float64()),  # by the weights fitted on held-in runs (logit; null: too few runs, fixed weights)
        ("held_in", pa.bool_()),  # a run of a problem the reward model saw: the fitted weights learned from it
    ]
)

# An off-the-shelf reward model's score of each run's plan, so re-evaluation costs nothing (one partition per
# scorer_id: a digest of the model, its weights, its head's seed and the input spec).
OFFSHELF_SCORES = pa.schema(
    [
        ("scorer_id", pa.string()),
        ("model", pa.string()),  # the model folder
        ("input_spec", pa.string()),  # JSON of the InputSpec the plans were read with
        ("run_id", pa.string()),
        ("score", pa.float64()),
        ("tokens", pa.int64()),  # what the model read: its verification cost
    ]
)

# An LLM judge's pick among a candidate set, so re-evaluation costs nothing.
JUDGE_CACHE = pa.schema(
    [
        ("cache_key", pa.string()),  # hash of (method, problem, candidate run_ids, model, reading)
        ("method", pa.string()),
        ("problem_id", pa.string()),
        ("candidates", pa.string()),  # the candidate run_ids in the order shown, JSON
        ("model", pa.string()),
        ("choice", pa.int64()),  # 0-based position of the chosen candidate
        ("parsed", pa.bool_()),  # false: the answer named no candidate and the first one was taken
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        # how the judge read the candidates of this call: "full" (whole), "full-cut" (whole but for those longer than
        # its context, cut with a note), "truncated:<chars>" (each cut at <chars>). Null: a row from before reading
        # modes (each cut at the then max_candidate_chars); its cache_key is of the old form, so it is never reused.
        ("reading", pa.string()),
    ]
)
