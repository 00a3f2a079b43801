"""`RewardScorer`'s interface over a vLLM server's pooling endpoint: the reward model runs in vLLM (a GPU machine,
continuous batching) while this process only tokenizes.

Contract: POST {base_url}/pooling with {"model": <served name>, "input": [[token ids], ...]} answers
{"data": [{"index": i, "data": <pooled output>}, ...]}; the pooled output of input i is its score as a number, a
one-element list, or one row per token (a list of numbers or of one-element lists, as a reward-task pooler that
returns every token gives), whose last row is read: the score at the input's last token, as `RewardScorer` reads a
decoder. The inputs are token ids encoded here as the checkpoint was trained to read them (`template.encode`), so
vLLM applies no template and truncates nothing, and the lengths returned are the tokens the model read. Serve the
checkpoint with a pooler that applies no activation (a sigmoid or softmax keeps the ranking but not the score).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Sequence

from orchrm_dagster.rm.score import GPU_BATCH_TOKENS, LengthBatchedScorer
from orchrm_dagster.rm.template import read_input_spec


class VLLMPoolingScorer(LengthBatchedScorer):
    def __init__(self, base_url: str, model: str, model_dir: str, max_length: int | None = None,
                 batch_size: int | None = 32, timeout_s: float = 60.0, max_batch_tokens: int | None = None):
        from transformers import AutoTokenizer

        self.url = base_url.rstrip("/") + "/pooling"
        self.model_name = model
        trained = read_input_spec(model_dir)
        self.spec = dataclasses.replace(trained, max_length=max_length) if max_length else trained
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens or GPU_BATCH_TOKENS
        self.timeout_s = timeout_s
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def forward(self, batch_ids: list[list[int]]) -> list[float]:
        body = json.dumps({"model": self.model_name, "input": batch_ids}).encode()
        request = urllib.request.Request(self.url, data=body, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{self.url} answered {error.code}: {error.read()[:500].decode(errors='replace')}") \
                from error
        data = sorted(answer.get("data") or [], key=lambda item: item["index"])
        if [item["index"] for item in data] != list(range(len(batch_ids))):
            raise RuntimeError(f"{self.url} answered {len(data)} results for {len(batch_ids)} inputs")
        return [pooled_score(item["data"], len(row)) for item, row in zip(data, batch_ids)]

    def count_plan_tokens(self, plans: Sequence[str]) -> list[int]:
        if not plans:
            return []
        return [len(row) for row in self.tokenizer(list(plans), add_special_tokens=False, verbose=False)["input_ids"]]


def pooled_score(pooled, tokens: int) -> float:
    """The score in one input's pooled output (see the module's contract)."""
    if isinstance(pooled, (int, float)):
        return float(pooled)
    if isinstance(pooled, list) and pooled:
        last = pooled[-1]
        if len(pooled) == 1 and isinstance(last, (int, float)):
            return float(last)
        if len(pooled) == tokens:  # one row per token: the last token's
            return pooled_score(last, 1)
    raise ValueError(f"a pooled output that is not one score nor one per token ({tokens} tokens): {str(pooled)[:200]}")
