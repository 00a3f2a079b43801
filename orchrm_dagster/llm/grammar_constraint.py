"""Grammar-constrained decoding for transformers models with xgrammar.

``compile_grammar`` compiles an EBNF grammar (xgrammar dialect) for one tokenizer, cached per
(tokenizer, vocabulary size, grammar text). ``GrammarLogitsProcessor`` is a transformers
``LogitsProcessor`` with one ``xgrammar.GrammarMatcher`` per batch row: usable in
``model.generate(logits_processor=[...])`` or in a hand-written decoding loop.
"""

from __future__ import annotations

import threading

import torch
import transformers
import xgrammar as xgr


class GrammarError(ValueError):
    """The grammar text does not compile."""


_compilers: dict[tuple[int, int], tuple[object, xgr.GrammarCompiler]] = {}
_compiled: dict[tuple[int, int, str], xgr.CompiledGrammar] = {}
_cache_lock = threading.Lock()


def _compiler(tokenizer, vocab_size: int, stop_token_ids: list[int] | None) -> xgr.GrammarCompiler:
    key = (id(tokenizer), vocab_size)
    if key not in _compilers:
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
        # the tokenizer is kept alive next to its compiler so that its id() is never reused
        _compilers[key] = (tokenizer, xgr.GrammarCompiler(info))
    return _compilers[key][1]


def compile_grammar(tokenizer, grammar: str, *, vocab_size: int | None = None,
                    stop_token_ids: list[int] | None = None) -> xgr.CompiledGrammar:
    """``grammar`` (EBNF, root rule ``root``) compiled for ``tokenizer``; raises GrammarError if invalid.

    ``vocab_size`` is the model's logits width (``config.vocab_size``), which may differ from the
    tokenizer's; ``stop_token_ids`` (default: the tokenizer's EOS) end the output once the grammar is
    complete. Both only count the first time a tokenizer is seen.
    """
    vocab_size = vocab_size or len(tokenizer)
    key = (id(tokenizer), vocab_size, grammar)
    with _cache_lock:
        if key not in _compiled:
            compiler = _compiler(tokenizer, vocab_size, stop_token_ids)
            try:
                _compiled[key] = compiler.compile_grammar(grammar)
            except Exception as exc:  # xgrammar reports syntax errors as RuntimeError subclasses
                raise GrammarError(f"grammar does not compile: {exc}") from exc
        return _compiled[key]


class GrammarLogitsProcessor(transformers.LogitsProcessor):
    """Masks every token the grammar forbids, one ``GrammarMatcher`` per batch row.

    Each call first feeds the last token of each row (``input_ids[:, -1]``) to that row's matcher,
    except on the first call (the prompt). A row whose matcher has terminated (the grammar is complete
    and a stop token was accepted) or rejected a token gets only ``eos_token_id`` from then on, so
    that finished rows of a batch keep emitting EOS/padding. Use one instance per generation.
    """

    def __init__(self, compiled: xgr.CompiledGrammar, batch_size: int, eos_token_id: int):
        self.matchers = [xgr.GrammarMatcher(compiled) for _ in range(batch_size)]
        self.rejected = [False] * batch_size
        self.eos_token_id = eos_token_id
        self._vocab_size = compiled.tokenizer_info.vocab_size
        self._bitmask = xgr.allocate_token_bitmask(batch_size, self._vocab_size)
        self._started = False

    def keep_rows(self, rows: list[int]) -> None:
        """Only these rows (by position) go on: the batch dropped the others."""
        self.matchers = [self.matchers[row] for row in rows]
        self.rejected = [self.rejected[row] for row in rows]
        self._bitmask = xgr.allocate_token_bitmask(len(rows), self._vocab_size)

    def is_complete(self, row: int) -> bool:
        """The text of ``row`` so far is a complete match of the grammar (stop token accepted or not)."""
        return self.matchers[row].is_completed() or self.matchers[row].is_terminated()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._started:
            self._accept(input_ids[:, -1].tolist())
        self._started = True
        rows = range(len(self.matchers))
        constrained = [row for row in rows if not self._finished(row)]
        for row in constrained:
            self.matchers[row].fill_next_token_bitmask(self._bitmask, row)
        if constrained:
            # xgrammar masks CPU and CUDA tensors; other devices (mps...) go through a CPU copy
            target = scores if scores.device.type in ("cpu", "cuda") else scores.cpu()
            xgr.apply_token_bitmask_inplace(target, self._bitmask.to(target.device), indices=constrained)
            if target is not scores:
                scores.copy_(target)
        for row in set(rows) - set(constrained):
            scores[row] = -torch.inf
            scores[row, self.eos_token_id] = 0.0
        return scores

    def _finished(self, row: int) -> bool:
        return self.rejected[row] or self.matchers[row].is_terminated()

    def _accept(self, tokens: list[int]) -> None:
        for row, token in enumerate(tokens):
            if not self._finished(row) and not self.matchers[row].accept_token(token):
                self.rejected[row] = True
