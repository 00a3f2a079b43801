"""The collaborative verifier (CRM-style): specialist evaluators each give a trajectory an interpretable partial
score in [0, 1], and a weighted aggregator fuses them. Every evaluator but `agreement` and `rank` looks at one
trajectory alone, so those partial scores are computed once per run; agreement and rank depend on the other candidates
of the set."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchrm_dagster.evaluation.settings import VerifierSettings, VerifierWeights

STATIC_EVALUATORS = ("format", "steps", "length", "repetition", "similarity")
COMPARED_EVALUATORS = ("agreement", *STATIC_EVALUATORS)  # what the ranking evaluator compares candidates on
PANEL_EVALUATORS = (*COMPARED_EVALUATORS, "rank")
RANK_CHUNK = 4_000_000  # pairwise evaluator comparisons computed at once by `pairwise_rank` (about 32 MB)
_TAGGED_ANSWER = re.compile(r"\\boxed\s*\{|<answer>.*?</answer>", re.DOTALL)
_ANSWER_MARK = re.compile(r"(?:final\s+)?answer\s*(?:is|:)", re.IGNORECASE)
_STEP = re.compile(r"(?im)^\s*(?:step\s*\d+|\d+[.)]\s|[-*]\s)|\b(?:first|then|next|therefore|finally|so)\b")
_WORD = re.compile(r"\w+")


def format_score(final_answer: str | None) -> float:
    """1 when the answer sits in the expected tags (\\boxed{} or <answer>), 0.5 after an "answer:" marker, else 0."""
    if not final_answer or not final_answer.strip():
        return 0.0
    if _TAGGED_ANSWER.search(final_answer):
        return 1.0
    return 0.5 if _ANSWER_MARK.search(final_answer) else 0.0


def steps_score(trajectory: str) -> float:
    """Reasoning-step structure: step markers and connectives, saturating at three."""
    return min(len(_STEP.findall(trajectory)) / 3.0, 1.0)


def length_score(chars: int, target_chars: int, max_chars: int) -> float:
    """Cosine-scaled length: 1 up to the target, falling along a half cosine to 0 at max_chars (discourages
    verbosity without rewarding an empty answer, which format and steps already score low)."""
    if chars <= target_chars:
        return 1.0
    if chars >= max_chars:
        return 0.0
    return 0.5 * (1.0 + math.cos(math.pi * (chars - target_chars) / (max_chars - target_chars)))


def repetition_score(trajectory: str) -> float:
    """1 minus the share of word 3-grams that repeat an earlier one (degenerate loops score near 0)."""
    words = _WORD.findall(trajectory.lower())
    grams = list(zip(words, words[1:], words[2:]))
    if not grams:
        return 1.0
    return len(set(grams)) / len(grams)


def agreement_score(answer: str | None, answers_of_others: Sequence[str | None]) -> float:
    """Share of the other candidates that give the same (non-empty) answer."""
    if not answer or not answers_of_others:
        return 0.0
    return sum(other == answer for other in answers_of_others) / len(answers_of_others)


def pairwise_rank(partials: np.ndarray) -> np.ndarray:
    """The ranking evaluator: each candidate compared with every other of its set, a Borda count of pairwise
    majority verdicts. `partials` is (sets, n, evaluators) of COMPARED_EVALUATORS' scores; candidate i beats j when
    more evaluators score i above j than j above i (a draw counts half). The result, (sets, n), is the share of the
    n - 1 comparisons each candidate wins: 1 for a candidate the panel prefers to every other, whatever the scale of
    each evaluator, which a weighted sum alone cannot say."""
    sets, n, _ = partials.shape
    if n < 2:
        return np.full((sets, n), 0.5)
    ranks = np.empty((sets, n))
    step = max(1, RANK_CHUNK // (n * n * partials.shape[2]))  # comparisons held at once stay near RANK_CHUNK
    for start in range(0, sets, step):
        part = partials[start:start + step]
        margin = np.sign(part[:, :, None, :] - part[:, None, :, :]).sum(-1)  # (sets, n, n)
        wins = (margin > 0) + 0.5 * (margin == 0)
        ranks[start:start + step] = (wins.sum(-1) - 0.5) / (n - 1)  # less each candidate's draw with itself
    return ranks


def fuse(weights: VerifierWeights, agreement: float, static: dict[str, float], rank: float = 0.0) -> float:
    return (weights.agreement * agreement + weights.rank * rank
            + sum(getattr(weights, name) * static[name] for name in STATIC_EVALUATORS))


@dataclass(frozen=True)
class StaticScores:
    """The per-run partial scores, column-wise, and the tokens the embedding model read per run."""

    format: list[float]
    steps: list[float]
    length: list[float]
    repetition: list[float]
    similarity: list[float]
    tokens: list[int]

    def fused(self, weights: VerifierWeights) -> list[float]:
        """The static part of the fused score (agreement excluded) of every run."""
        return [sum(getattr(weights, name) * getattr(self, name)[i] for name in STATIC_EVALUATORS)
                for i in range(len(self.tokens))]


def static_scores(questions: Sequence[str], final_answers: Sequence[str | None], trajectories: Sequence[str],
                  settings: VerifierSettings, embedder=None) -> StaticScores:
    """Every evaluator that needs one trajectory only. Without an embedder, similarity is 0 and costs no tokens."""
    similarity, tokens = ([0.0] * len(trajectories), [0] * len(trajectories))
    if embedder is not None and trajectories:
        similarity, tokens = embedder.similarity(questions, trajectories)
    return StaticScores(
        format=[format_score(a) for a in final_answers],
        steps=[steps_score(t) for t in trajectories],
        length=[length_score(len(t), settings.target_chars, settings.max_chars) for t in trajectories],
        repetition=[repetition_score(t) for t in trajectories],
        similarity=similarity,
        tokens=tokens,
    )


class MiniLMEmbedder:
    """Mean-pooled sentence embeddings (all-MiniLM-L6-v2 by default) and the cosine similarity of each trajectory
    to its question, mapped to [0, 1]."""

    def __init__(self, model_path: str, device: str = "auto", max_length: int = 256, batch_size: int = 32):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from orchrm_dagster.devices import resolve_device

        self.device = resolve_device(device)
        self.max_length = max_length
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModel.from_pretrained(model_path, dtype=torch.float32).to(self.device).eval()

    def embed(self, texts: Sequence[str]):
        """L2-normalised embeddings, and the tokens read for each text."""
        import torch

        vectors, lengths = [], []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad less
        for start in range(0, len(order), self.batch_size):
            batch = [texts[i] for i in order[start:start + self.batch_size]]
            encoded = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length,
                                     return_tensors="pt").to(self.device)
            with torch.inference_mode():
                hidden = self.model(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            vectors.append(torch.nn.functional.normalize(pooled, dim=-1).cpu())
            lengths += encoded["attention_mask"].sum(1).tolist()
        stacked = torch.cat(vectors) if vectors else torch.empty(0)
        unsorted = torch.empty_like(stacked)
        token_counts = [0] * len(texts)
        for position, index in enumerate(order):
            unsorted[index] = stacked[position]
            token_counts[index] = int(lengths[position])
        return unsorted, token_counts

    def similarity(self, questions: Sequence[str], trajectories: Sequence[str]) -> tuple[list[float], list[int]]:
        unique_questions = list(dict.fromkeys(questions))
        question_vectors, question_tokens = self.embed(unique_questions)
        where = {q: i for i, q in enumerate(unique_questions)}
        trajectory_vectors, trajectory_tokens = self.embed(trajectories)
        rows = [where[q] for q in questions]
        cosine = (trajectory_vectors * question_vectors[rows]).sum(-1)
        similarity = ((cosine + 1.0) / 2.0).clamp(0.0, 1.0).tolist()
        return similarity, [t + question_tokens[r] for t, r in zip(trajectory_tokens, rows)]
