"""How a trace becomes a run record: which span, attribute or metadata key holds each field of the contract.

Attribute names are looked up on the orchestrator's span, then the plan span, then the trace's root (a Langfuse
trace's metadata and scores, a LangSmith root run's `extra.metadata`), then the OTel resource: the first that holds
one wins. Nested metadata is read dotted (`{"orchrm": {"problem_id": ...}}` holds `orchrm.problem_id`). The defaults
of the span kinds are the OpenTelemetry GenAI semantic conventions' operation names (`traces.otel`).
"""

from __future__ import annotations

from typing import Literal

from orchrm_dagster.engine_config import Field, engine_config

# gen_ai.operation.name values (semantic conventions v1.41.0): what an agent, an inference and a tool span are
AGENT_OPERATIONS = ("invoke_agent",)
INFERENCE_OPERATIONS = ("chat", "text_completion", "generate_content")
TOOL_OPERATIONS = ("execute_tool",)
# the tools a run's label and score go back to: the one its trace came from (a trace format of `traces.reader`)
EXPORT_TOOLS = ("langfuse", "langsmith", "otel")


@engine_config
class ScoreExportSettings:
    """Imported traces' labels and champion scores back in the tool they came from (`orchrm export-scores`, and the
    scoring step with after_scoring): each run's to its own tool, over the tool's HTTP API where its URL and key are
    set (a key only from the tool's own environment variable, never from a file), else written as files."""

    tools: tuple[Literal["langfuse", "langsmith", "otel"], ...] = Field(
        default=EXPORT_TOOLS, description="Export the runs imported from these tools (langfuse, langsmith, otel), "
                                          "each run to its own")
    after_scoring: bool = Field(default=False,
                                description="The scoring step (rm_scores: the loop's, the daemon's, orchrm "
                                            "materialize's) exports after it scores, as orchrm export-scores does; "
                                            "an export that fails leaves the scores written and says why in the "
                                            "step's log and metadata")
    langfuse_host: str | None = Field(default=None,
                                      description="Langfuse's base URL (https://cloud.langfuse.com, or your own); "
                                                  "unset: LANGFUSE_HOST. Pushed with LANGFUSE_PUBLIC_KEY and "
                                                  "LANGFUSE_SECRET_KEY; without them: files")
    langsmith_endpoint: str | None = Field(default=None,
                                           description="LangSmith's API URL (https://api.smith.langchain.com, or "
                                                       "your own); unset: LANGSMITH_ENDPOINT. Pushed with "
                                                       "LANGSMITH_API_KEY; without it: files")
    otlp_endpoint: str | None = Field(default=None,
                                      description="An OTLP/HTTP endpoint's base URL (a collector's "
                                                  "http://localhost:4318): spans go to its /v1/traces; unset: "
                                                  "OTEL_EXPORTER_OTLP_ENDPOINT (headers: OTEL_EXPORTER_OTLP_HEADERS); "
                                                  "neither: files")
    out_dir: str | None = Field(default=None,
                                description="Where a tool not pushed gets its files (a local folder or s3:// URL); "
                                            "unset: exports/scores under the storage root")
    label_name: str = Field(default="orchrm.label.is_correct",
                            description="The name of the label's score (Langfuse), feedback key (LangSmith) and span "
                                        "attribute (OTel)")
    score_name: str = Field(default="orchrm.rm.score",
                            description="The name of the champion's score (Langfuse), feedback key (LangSmith) and "
                                        "span attribute (OTel)")
    batch_size: int = Field(default=100, ge=1, description="Runs per OTLP request (and per line of an OTLP file)")
    timeout_s: float = Field(default=30.0, gt=0, description="Seconds one HTTP request may take")


@engine_config
class TraceSettings:
    """How imported traces (`orchrm import-traces`, trace files landed) are mapped onto run records: where each
    field of the artifact contract is read from; and how their labels and scores go back (`export_scores`)."""

    run_id_attribute: str = Field(default="orchrm.run_id",
                                  description="Attribute holding the run_id (else the trace id is the run_id)")
    problem_id_attribute: str = Field(default="orchrm.problem_id",
                                      description="Attribute holding the problem_id (required: a trace without one "
                                                  "is quarantined)")
    benchmark_attribute: str = Field(default="orchrm.benchmark",
                                     description="Attribute holding the benchmark (else default_benchmark)")
    default_benchmark: str | None = Field(default=None, description="The benchmark of a trace that names none (unset: "
                                                                    "such a trace is quarantined)")
    question_attribute: str = Field(default="orchrm.question",
                                    description="Attribute holding the question (else the orchestrator's input: its "
                                                "last user message)")
    reference_answer_attribute: str = Field(default="orchrm.reference_answer",
                                            description="Attribute holding the reference answer (optional)")
    is_correct_attribute: str = Field(default="orchrm.is_correct",
                                      description="Attribute holding the producer's verdict, a boolean (optional; also "
                                                  "a Langfuse score of this name); trusted where labels."
                                                  "trust_run_labels says so")
    plan_attribute: str = Field(default="orchrm.plan",
                                description="Attribute holding the plan verbatim; the span carrying it is the plan "
                                            "span (else the plan is the output of the plan span)")
    final_answer_attribute: str = Field(default="orchrm.final_answer",
                                        description="Attribute holding the final answer (else the orchestrator's "
                                                    "output, else the last sub-agent call's)")
    policy_name_attribute: str = Field(default="orchrm.policy.name",
                                       description="Attribute holding the policy's name (else the orchestrator's "
                                                   "agent name, the plan span's model, the service name)")
    policy_kind_attribute: str = Field(default="orchrm.policy.kind",
                                       description="Attribute holding the policy's kind (else default_policy_kind)")
    default_policy_kind: Literal["base", "specialized", "checkpoint"] = Field(
        default="base", description="The policy kind of a trace that names none")
    policy_step_attribute: str = Field(default="orchrm.policy.step",
                                       description="Attribute holding a checkpoint's training step (optional)")
    sample_index_attribute: str = Field(default="orchrm.sample_index",
                                        description="Attribute holding the sample index (optional)")
    plan_logprob_attribute: str = Field(default="orchrm.plan_logprob",
                                        description="Attribute holding the plan's mean token log-probability "
                                                    "(optional)")
    environment_attribute: str = Field(default="orchrm.environment",
                                       description="Attribute naming where the plan was executed (optional)")
    role_attribute: str = Field(default="orchrm.role",
                                description="Attribute marking a span's role explicitly: orchestrator, plan or "
                                            "subagent (a trace with a subagent mark has no other sub-agents)")
    orchestrator_agent: str | None = Field(default=None,
                                           description="Agent name of the orchestrator's span (unset: the nearest "
                                                       "agent span above the plan span, else the trace's root)")
    plan_span: str | None = Field(default=None,
                                  description="Name of the plan span (unset: the orchestrator's first inference span)")
    agent_operations: tuple[str, ...] = Field(default=AGENT_OPERATIONS,
                                              description="gen_ai.operation.name values of agent spans (sub-agent "
                                                          "calls, or the orchestrator)")
    inference_operations: tuple[str, ...] = Field(default=INFERENCE_OPERATIONS,
                                                  description="gen_ai.operation.name values of inference spans (the "
                                                              "plan, and every call's tokens)")
    tool_operations: tuple[str, ...] = Field(default=TOOL_OPERATIONS,
                                             description="gen_ai.operation.name values of tool spans (a sub-agent "
                                                         "call where the orchestrator makes it directly)")
    max_file_bytes: int = Field(default=256 << 20, ge=1,
                                description="A larger trace file is not read (it is read whole: a trace's spans may "
                                            "be anywhere in it); split it")
    export_scores: ScoreExportSettings = Field(
        default_factory=ScoreExportSettings,
        description="Where the imported runs' labels and champion scores go back (orchrm export-scores)")
