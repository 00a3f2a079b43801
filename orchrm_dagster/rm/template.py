"""The one input format of the reward model, shared by training and scoring.

A plan is scored together with its question: r(x, z) reads `format_input(x, z)`. Training and scoring must tokenize
identically, so both go through `encode`.
"""

from __future__ import annotations

from collections.abc import Sequence

TEMPLATE = "Question:\n{question}\n\nPlan:\n{plan}"
# The plan is what is being scored: a long question may take at most this share of max_length, so that
# truncation never leaves the plan out.
QUESTION_SHARE = 1 / 3


def format_input(question: str, plan: str) -> str:
    return TEMPLATE.format(question=question, plan=plan)


def encode(tokenizer, questions: Sequence[str], plans: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of each (question, plan), truncated to max_length, unpadded.

    Decoder tokenizers (Llama, Qwen) get an EOS appended so that the score, read at the last non-pad token, is read
    at the end of the plan; encoder tokenizers (BERT/MiniLM) have no EOS and already end with [SEP].
    """
    if len(questions) != len(plans):
        raise ValueError(f"{len(questions)} questions but {len(plans)} plans")
    if not questions:
        return []  # fast tokenizers fail on an empty batch
    eos = tokenizer.eos_token_id
    limit = max_length - (eos is not None)
    questions = shorten_questions(tokenizer, questions, int(max_length * QUESTION_SHARE))
    texts = [format_input(q, p) for q, p in zip(questions, plans)]
    ids = tokenizer(texts, truncation=True, max_length=limit)["input_ids"]
    if eos is None:
        return ids
    return [row if row and row[-1] == eos else row + [eos] for row in ids]


def shorten_questions(tokenizer, questions: Sequence[str], budget: int) -> list[str]:
    """Each question cut to `budget` tokens (decoded back to text), the others unchanged."""
    ids = tokenizer(list(questions), add_special_tokens=False, verbose=False)["input_ids"]
    return [q if len(row) <= budget else tokenizer.decode(row[:budget]) + " ..." for q, row in zip(questions, ids)]
