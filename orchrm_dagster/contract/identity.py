"""Identities the tables share: how a plan is recognised across runs."""

from __future__ import annotations

import hashlib

# ASCII whitespace other than space and newline: str.split() splits on these too (\x1c-\x1f included)
_RARE_ASCII_SPACE = b"\t\x0b\x0c\r\x1c\x1d\x1e\x1f"
_NEWLINE_AS_SPACE = bytes.maketrans(b"\n", b" ")


def plan_hash(plan: str) -> str:
    """Identity of a plan up to whitespace: the pair rules compare plans by this."""
    return hashlib.blake2b(_normalized_plan(plan), digest_size=16).digest().hex()


def _normalized_plan(plan: str) -> bytes:
    """`plan` with every run of whitespace made one space and none at either end, as UTF-8."""
    encoded = plan.encode()
    if len(encoded) == len(plan):  # ASCII: the common plan, normalised without splitting it into words
        spaced = encoded.translate(_NEWLINE_AS_SPACE, _RARE_ASCII_SPACE)
        if len(spaced) == len(encoded) and b"  " not in spaced and spaced[:1] != b" " and spaced[-1:] != b" ":
            return spaced
    return " ".join(plan.split()).encode()
