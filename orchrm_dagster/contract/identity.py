"""Identities the tables share: how a plan is recognised across runs."""

from __future__ import annotations

import hashlib


def plan_hash(plan: str) -> str:
    """Identity of a plan up to whitespace: the pair rules compare plans by this."""
    return hashlib.blake2b(" ".join(plan.split()).encode(), digest_size=16).hexdigest()
