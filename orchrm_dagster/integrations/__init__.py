"""The champion reward model where other trainers run: a TRL reward function (`integrations.trl`) that scores through
`orchrm serve` over HTTP or in process (no Dagster). OpenRLHF's remote reward-model protocol is answered by the
service itself (`serving.openrlhf`)."""
