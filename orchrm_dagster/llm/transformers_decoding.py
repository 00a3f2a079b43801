"""The transformers backend's engine (torch): batched chat generation on CPU (or one GPU). Its spec,
`transformers_backend.TransformersSpec`, imports this module when it builds a backend.

By default it runs the embedded SmolLM2-135M-Instruct GGUF (dequantised to fp32 by transformers), so
that the whole pipeline works on a laptop without downloads. Models are loaded on the first
``generate`` and shared by every backend of the process that names the same model.

Decoding is a small loop over the model's forward pass with a KV cache (rather than
``model.generate``) so that each row of a batch can have its own seed (a ``torch.Generator``), its
own ``max_new_tokens`` and stop strings, and its own grammar matcher. The cache (``decoding_cache``:
growing or static, ``llm.kv_cache``) changes how fast a step runs, not what it samples.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from orchrm_dagster.devices import resolve_device
from orchrm_dagster.llm.base import ChatRequest, Completion, SamplingSettings
from orchrm_dagster.llm.embedded import EMBEDDED_GGUF, embedded_model_dir
from orchrm_dagster.llm.grammar_constraint import GrammarLogitsProcessor, compile_grammar
from orchrm_dagster.llm.cache_kind import DecodingCache, resolved_cache_kind
from orchrm_dagster.llm.kv_cache import (decoding_cache, filled_static_cache, full_attention_only, left_padded,
                                         release_static_caches, static_batch, static_cache_length)
from orchrm_dagster.llm.shared_prefix import attending, shares_prefixes
from orchrm_dagster.llm.shared_prefix import prefill as prefill_once


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    stop_token_ids: frozenset[int]
    eos_token_id: int
    pad_token_id: int
    lock: threading.Lock = field(default_factory=threading.Lock)  # one forward loop at a time per model


_MODELS: dict[tuple[str, str | None, str, str], LoadedModel] = {}
_MODELS_LOCK = threading.Lock()


def load_model(model_path: str, gguf_file: str | None = None, device: str = "auto",
               dtype: str = "float32") -> LoadedModel:
    """The model and tokenizer at ``model_path`` (optionally one GGUF file in it), loaded once per process."""
    key = (model_path, gguf_file, device, dtype)
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = _load(*key)
        return _MODELS[key]


def unload_model(model_path: str) -> None:
    """Forgets the models loaded from `model_path` (every GGUF file, device and dtype) and drops their static caches,
    so that their memory goes back to the device once no decoding holds them (a held-out policy's, before the round
    trains). A backend on that folder loads it again on its next `generate`."""
    with _MODELS_LOCK:
        unloaded = [_MODELS.pop(key) for key in list(_MODELS) if key[0] == model_path]
    for lm in unloaded:
        release_static_caches(lm.model)


def _load(model_path: str, gguf_file: str | None, device: str, dtype: str) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = resolve_device(device)
    source = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(model_path, **source)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_torch_dtype(dtype, device), **source)
    model.to(device).eval()
    return loaded_model(model, tokenizer)


def loaded_model(model: torch.nn.Module, tokenizer) -> LoadedModel:
    """A model already in memory (a trainer's policy, say) and its tokenizer, ready for :func:`sample_rows`: stops
    at the tokenizer's EOS and at every EOS the model's generation config names."""
    eos = tokenizer.eos_token_id
    configured = model.generation_config.eos_token_id
    configured = configured if isinstance(configured, list) else [configured]
    stop = frozenset(t for t in [eos, *configured] if t is not None)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return LoadedModel(model, tokenizer, stop, eos, pad)


def _torch_dtype(dtype: str, device: str) -> torch.dtype | str:
    """``"auto"``: float32 on CPU (fast and exact there), the checkpoint's own dtype elsewhere."""
    if dtype == "auto":
        return torch.float32 if device == "cpu" else "auto"
    return getattr(torch, dtype)


@dataclass
class _Row:
    """One request on its way through a batch."""

    index: int  # position in the caller's list
    request: ChatRequest
    prompt_ids: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_text: str | None = None  # the text cut at a stop string, once one appeared
    finish_reason: str | None = None

    @property
    def sampling(self) -> SamplingSettings:
        return self.request.sampling


class TransformersBackend:
    """:class:`~orchrm_dagster.llm.base.LLMBackend` on a local transformers causal LM.

    ``model_path=None`` runs the embedded SmolLM2 GGUF. Requests are batched (left padding, at most
    ``max_batch_size`` rows per forward pass) in groups of equal temperature, top_p and grammar;
    seeds, ``max_new_tokens`` and stop strings are per row. ``temperature == 0`` is greedy.

    ``token_logprobs`` are the log-softmax, at each chosen token, of the scores the token was chosen
    from: the logits after the grammar mask, then (when sampling) divided by the temperature and
    top-p truncated. They include the final EOS token, like ``completion_tokens``.
    """

    batches_in_process = True  # concurrent callers gain from sharing a batch (llm.coalescing)

    def __init__(self, model_path: str | None = None, gguf_file: str | None = None, device: str = "auto",
                 dtype: str = "float32", max_batch_size: int = 8, name: str = "transformers",
                 decoding_cache: DecodingCache = "auto"):
        if model_path is None:
            model_path, gguf_file = str(embedded_model_dir()), gguf_file or EMBEDDED_GGUF
        self.name = name
        self.model_id = Path(gguf_file).stem if gguf_file else model_path
        self.max_batch_size = max(1, max_batch_size)
        self.decoding_cache = decoding_cache
        self._model_key = (model_path, gguf_file, device, dtype)

    def loaded(self) -> LoadedModel:
        """The model and tokenizer (loaded now if this process has not loaded them yet)."""
        return load_model(*self._model_key)

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        try:
            lm = self.loaded()
        except Exception as exc:
            return [_failed(f"loading {self.model_id} failed: {exc!r}") for _ in requests]
        return [_completion(lm, row) if isinstance(row, _Row) else row
                for row in sample_rows(lm, requests, self.max_batch_size, self.decoding_cache)]


def _failed(message: str) -> Completion:
    return Completion(text="", prompt_tokens=0, completion_tokens=0, finish_reason="error", error=message)


def _prompt_ids(lm: LoadedModel, request: ChatRequest) -> list[int]:
    if request.sampling.temperature < 0 or not 0 < request.sampling.top_p <= 1:
        raise ValueError("temperature must be >= 0 and top_p in (0, 1]")
    prompt = lm.tokenizer.apply_chat_template(list(request.messages), tokenize=False, add_generation_prompt=True)
    return lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]


def _batches(rows: list[_Row], max_batch_size: int) -> Iterator[list[_Row]]:
    """Rows grouped by (temperature, top_p, grammar), shortest prompts together, in chunks."""
    groups: dict[tuple, list[_Row]] = defaultdict(list)
    for row in rows:
        groups[(row.sampling.temperature, row.sampling.top_p, row.request.grammar)].append(row)
    for group in groups.values():
        group.sort(key=lambda row: len(row.prompt_ids))
        for start in range(0, len(group), max_batch_size):
            yield group[start:start + max_batch_size]


def sample_rows(lm: LoadedModel, requests: list[ChatRequest], max_batch_size: int,
                decoding_cache: DecodingCache = "auto") -> list[_Row | Completion]:
    """Each request decoded (batched, grammar-constrained, seeded per row): its row, with the prompt's token ids and
    the sampled ones, or a failed Completion saying why. The one decoding routine of the runner and of GRPO rounds.
    `decoding_cache` picks the KV cache on the model's device (`llm.cache_kind.resolved_cache_kind`)."""
    static = resolved_cache_kind(decoding_cache, lm.model.device.type) == "static" and full_attention_only(lm.model)
    results: list[_Row | Completion | None] = [None] * len(requests)
    rows: list[_Row] = []
    for index, request in enumerate(requests):
        try:
            rows.append(_Row(index, request, _prompt_ids(lm, request)))
        except Exception as exc:
            results[index] = _failed(f"bad request: {exc!r}")
    for batch in _batches(rows, max_batch_size):
        decoded = batch + _ghost_rows(batch, static_batch(len(batch), max_batch_size)) if static else batch
        failure = _run_batch(lm, decoded, static)
        for row in batch:
            results[row.index] = failure or row
    return results


def _ghost_rows(rows: list[_Row], batch: int) -> list[_Row]:
    """Rows that fill a static cache's batch to `batch`: copies of the first row, finished from the start (they feed
    padding, as a finished row does), whose results nobody reads. A row's tokens depend on its own seed and scores
    only, so the real rows sample what they sample without them. A ghost is seeded even where the first row is not:
    it must not draw from the generator unseeded rows draw from."""
    first = rows[0].request
    ghost = dataclasses.replace(first, sampling=dataclasses.replace(first.sampling, seed=first.sampling.seed or 0))
    return [_Row(-1, ghost, rows[0].prompt_ids, finish_reason="ghost") for _ in range(batch - len(rows))]


def _run_batch(lm: LoadedModel, rows: list[_Row], static: bool) -> Completion | None:
    """Decodes the rows in place; the failed Completion every row of the batch gets when it fails."""
    try:
        processor = _grammar_processor(lm, rows)
    except Exception as exc:
        return _failed(f"bad grammar: {exc}")
    try:
        with lm.lock, torch.inference_mode():
            _decode(lm, rows, processor, static)
    except Exception as exc:
        return _failed(f"generation failed: {exc!r}")
    return None


def _grammar_processor(lm: LoadedModel, rows: list[_Row]) -> GrammarLogitsProcessor | None:
    grammar = rows[0].request.grammar  # a batch shares one grammar
    if grammar is None:
        return None
    compiled = compile_grammar(lm.tokenizer, grammar, vocab_size=lm.model.config.vocab_size,
                               stop_token_ids=sorted(lm.stop_token_ids))
    return GrammarLogitsProcessor(compiled, len(rows), lm.eos_token_id)


def _decode(lm: LoadedModel, rows: list[_Row], processor: GrammarLogitsProcessor | None, static: bool) -> None:
    """Generates every row to its end (stop token, stop string or max_new_tokens), in place. On a growing cache rows
    that finished leave the batch once they are a quarter of it, so a step costs what the rows still decoding need (a
    row's tokens depend on its own seed and scores only, not on which rows share its batch). On a static cache they
    stay (feeding padding): a smaller batch is another shape, so another compiled graph, and a cache copied into new
    buffers; on a GPU a step of a few rows more costs little, as it reads the same weights. For the same reason the
    caller fills a static batch up to a bucketed size with ghost rows (`_ghost_rows`)."""
    model, device = lm.model, lm.model.device
    steps = max(row.sampling.max_new_tokens for row in rows)
    if not static and decoding_cache(model) is not None and shares_prefixes(model):
        # the prompts held once (their common prefix, each one's tail); the rows' caches hold what they generate
        logits, prefix = prefill_once(model, [row.prompt_ids for row in rows], lm.pad_token_id,
                                      lambda: decoding_cache(model))
        last = torch.tensor([row.prompt_ids[-1:] for row in rows], device=device)
        positions = torch.tensor([[len(row.prompt_ids) - 1] for row in rows], device=device)
        with attending(model):
            _decode_steps(lm, rows, processor, False, logits, decoding_cache(model), prefix, None, positions, last,
                          steps)
    else:
        input_ids, attention = left_padded([row.prompt_ids for row in rows], lm.pad_token_id, device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        out = _prefill(model, input_ids, attention, positions, [tuple(row.prompt_ids) for row in rows])
        cache, prompt_width = out.past_key_values, input_ids.shape[1]
        if static:
            cache = filled_static_cache(model, cache, prompt_width + steps)
            # the mask covers the whole cache from the start; a step opens its token's column
            attention = torch.nn.functional.pad(attention, (0, static_cache_length(cache) - prompt_width))
        _decode_steps(lm, rows, processor, static, out.logits[:, -1, :], cache, None, attention, positions,
                      input_ids, steps)
    for row in rows:
        row.finish_reason = row.finish_reason or "length"


def _decode_steps(lm: LoadedModel, rows: list[_Row], processor, static: bool, logits, cache, prefix, attention,
                  positions, input_ids, steps: int) -> None:
    """The decoding loop from the prompts' last logits, over a static cache or a growing one holding each row's
    prompt, or over the prompts held once (`prefix`, `llm.shared_prefix`) and a growing cache of what the rows
    generate (then `attention` is None: the prefix masks the prompts' padding, and a row attends to all it
    generated)."""
    model, device = lm.model, lm.model.device
    temperature, top_p = rows[0].sampling.temperature, rows[0].sampling.top_p
    generators = [_generator(row.sampling.seed, device) for row in rows]
    prompt_width = input_ids.shape[1]
    forward = _decode_step(model, static)
    live, last = list(range(len(rows))), input_ids  # the rows still in the batch, by index into rows
    for step in range(steps):
        scores = logits.float()
        if processor is not None:
            scores = processor(last, scores)
        logprobs = torch.log_softmax(_warp(scores, temperature, top_p), dim=-1)
        chosen = _choose(logprobs, temperature, [generators[i] for i in live])
        # one device-to-host copy per step: indexing a GPU tensor per row waits on the device twice per row
        tokens, token_logprobs = chosen.tolist(), logprobs.gather(1, chosen[:, None]).squeeze(1).tolist()
        for i, token, logprob in zip(live, tokens, token_logprobs):
            if rows[i].finish_reason is None:
                _advance(lm, rows[i], token, logprob)
        done = [rows[i].finish_reason is not None for i in live]
        if all(done):
            break
        if not static and 4 * sum(done) >= len(live):
            keep = [k for k, finished in enumerate(done) if not finished]
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            if prefix is not None:
                prefix.keep_rows(keep)
            else:
                attention = attention[index]
            positions, chosen = positions[index], chosen[index]
            if processor is not None:
                processor.keep_rows(keep)
            live, done = [live[k] for k in keep], [False] * len(keep)
        last = chosen.masked_fill(torch.tensor(done, device=device), lm.pad_token_id)[:, None]
        positions = positions[:, -1:] + 1
        if prefix is not None:
            logits = forward(input_ids=last, position_ids=positions, past_key_values=cache, shared_prefix=prefix)
            continue
        if static:
            attention[:, prompt_width + step] = 1
        else:
            attention = torch.cat([attention, attention.new_ones((len(live), 1))], dim=1)
        logits = forward(input_ids=last, attention_mask=attention, position_ids=positions, past_key_values=cache)


def _decode_step(model, static: bool):
    """The decode step: the last token's logits (rows x vocabulary) after one forward pass. On a static cache on CUDA
    the forward pass is compiled as transformers' `generate` compiles it with a static cache (`get_compiled_call`:
    its CompileConfig, inductor with CUDA graphs, "reduce-overhead"; the prefill is never compiled), and the logits
    are copied out of the graphs' memory, which the next replay overwrites. CUDA graphs are recorded per calling
    thread (torch's cudagraph trees are thread-local): a decoding loop on another thread records its own."""
    if static and model.device.type == "cuda" and hasattr(model, "get_compiled_call"):
        compiled = model.get_compiled_call(None)
        return lambda **inputs: compiled(**inputs, use_cache=True).logits[:, -1, :].to(torch.float32, copy=True)
    return lambda **inputs: model(**inputs, use_cache=True).logits[:, -1, :]


def _prefill(model, input_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, prompts: list[tuple]):
    """The prompts' forward pass, each distinct prompt once (N samples of a problem, a GRPO group, several problems'
    held-out samples), its KV cache and last logits copied to each of its rows: on the CPU the prompt, not the plan,
    is most of the work."""
    cache = decoding_cache(model)
    first = {prompt: row for row, prompt in reversed(list(enumerate(prompts)))}  # each prompt's first row
    if len(first) == len(prompts):
        return model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                     past_key_values=cache, logits_to_keep=1)
    distinct = sorted(first.values())
    out = model(input_ids=input_ids[distinct], attention_mask=attention[distinct], position_ids=positions[distinct],
                use_cache=True, past_key_values=cache, logits_to_keep=1)
    position = {row: i for i, row in enumerate(distinct)}
    index = torch.tensor([position[first[prompt]] for prompt in prompts], device=input_ids.device)
    out.past_key_values.batch_select_indices(index)
    out.logits = out.logits[index]  # a copy per row: the grammar masks rows in place
    return out



def _generator(seed: int | None, device) -> torch.Generator | None:
    return None if seed is None else torch.Generator(device=device).manual_seed(seed)


def _warp(scores: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    if temperature == 0:
        return scores
    scores = scores / temperature
    if top_p >= 1.0:
        return scores
    ordered, order = scores.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    outside_nucleus = probs.cumsum(dim=-1) - probs > top_p  # never drops the most likely token
    return scores.scatter(-1, order, ordered.masked_fill(outside_nucleus, -torch.inf))


def _choose(logprobs: torch.Tensor, temperature: float, generators: list[torch.Generator | None]) -> torch.Tensor:
    if temperature == 0:
        return logprobs.argmax(dim=-1)
    probs = logprobs.exp()
    return torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(generators)])


def _advance(lm: LoadedModel, row: _Row, token: int, logprob: float) -> None:
    row.tokens.append(token)
    row.logprobs.append(logprob)
    if token in lm.stop_token_ids:
        row.finish_reason = "stop"
        return
    if row.sampling.stop:
        text = _text(lm, row.tokens)
        cut = min((i for i in (text.find(s) for s in row.sampling.stop if s) if i >= 0), default=-1)
        if cut >= 0:
            row.stop_text, row.finish_reason = text[:cut], "stop"
            return
    if len(row.tokens) >= row.sampling.max_new_tokens:
        row.finish_reason = "length"


def _text(lm: LoadedModel, tokens: list[int]) -> str:
    return lm.tokenizer.decode(tokens, skip_special_tokens=True)


def _completion(lm: LoadedModel, row: _Row) -> Completion:
    text = row.stop_text if row.stop_text is not None else _text(lm, row.tokens)
    return Completion(
        text=text,
        prompt_tokens=len(row.prompt_ids),
        completion_tokens=len(row.tokens),
        token_logprobs=tuple(row.logprobs) if row.request.want_logprobs else None,
        finish_reason=row.finish_reason or "length",
    )
