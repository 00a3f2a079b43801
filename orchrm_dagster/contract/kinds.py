"""The closed vocabularies the tables use: policy kinds and the kinds of failure a row records. (Answer types are
open: one per registered labeler, see `orchrm_dagster.labels`.)"""

from __future__ import annotations

from enum import Enum
from typing import Literal, get_args

PolicyKind = Literal["base", "specialized", "checkpoint"]
POLICY_KINDS: tuple[str, ...] = get_args(PolicyKind)
# The kinds by name. Which runs win or lose specialized-over-base pairs is decided in one place,
# `orchrm_dagster.pairs.policy_side`: a `specialized` policy's (an orchestrator whose quality was established outside
# this root's reward model) win, a `checkpoint`'s only when this root promoted it on measured held-out accuracy,
# a `base` policy's lose.
BASE_KIND, SPECIALIZED_KIND, CHECKPOINT_KIND = POLICY_KINDS


class RunErrorKind(str, Enum):
    """Why an executed (or unexecutable) plan has no final answer; `meta.error_kind` of a run record."""

    GENERATION_FAILED = "generation_failed"  # the orchestrator produced no plan text
    PLAN_UNPARSEABLE = "plan_unparseable"  # the plan text is not a valid plan
    AGENT_FAILED = "agent_failed"  # a sub-agent's LLM call (or the agent itself) failed
    TIMEOUT = "timeout"  # a call to the environment did not answer in time (the team's endpoint, a sub-agent's server)
    PLAN_TIMEOUT = "plan_timeout"  # the plan ran past its own wall-clock budget (plan_timeout_s): the plan's doing
    EXECUTOR_FAILED = "executor_failed"  # a bug in the executor, caught so the batch goes on


# A run that failed for a cause outside its plan's answer (no plan text, a sub-agent's call or the team's endpoint
# failing or not answering in time, the executor): no verdict on the plan. Labels leave its is_correct unset (never
# wrong) and the policy gate counts it as a failed measurement. A plan that does not parse, or that runs past its own
# time budget (plan_timeout), is the plan's own fault: incorrect.
NO_VERDICT_KINDS = frozenset({RunErrorKind.GENERATION_FAILED, RunErrorKind.AGENT_FAILED, RunErrorKind.TIMEOUT,
                              RunErrorKind.EXECUTOR_FAILED})


class QuarantineKind(str, Enum):
    """Why a line of a run batch went to quarantine (the `kind` column)."""

    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    INVALID_FIELD = "invalid_field"  # the contract's schema rejected a field (see `field`)
    OVERSIZE_RECORD = "oversize_record"
    OVERSIZE_FIELD = "oversize_field"
    UNSTORABLE_VALUE = "unstorable_value"  # valid, but a table cannot hold it (an integer past 64 bits, a NaN)
    UNREADABLE_FILE = "unreadable_file"  # the batch file itself cannot be read (a corrupt Parquet file)
    DUPLICATE_IN_FILE = "duplicate_in_file"  # the run_id appeared earlier in the same file
    ALREADY_INGESTED = "already_ingested"  # another batch already holds the run_id
    UNPLACEABLE_TRACE = "unplaceable_trace"  # a trace of a trace file the mapping cannot make a run of (traces)
