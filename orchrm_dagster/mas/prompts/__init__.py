"""Prompt templates of the sub-agents and the orchestrator, one ``<name>.txt`` file each.

A template is plain text for ``str.format``: ``{placeholder}`` is filled in, ``{{`` / ``}}`` are
literal braces. Leading lines starting with ``#`` document the placeholders and are stripped.
"""

from __future__ import annotations

import string
from functools import lru_cache
from pathlib import Path

PROMPT_DIR = Path(__file__).parent


def prompt_names() -> tuple[str, ...]:
    """Names of all the prompt files, sorted."""
    return tuple(sorted(p.stem for p in PROMPT_DIR.glob("*.txt")))


@lru_cache(maxsize=None)
def load_prompt(name: str) -> str:
    """The template ``name`` without its leading comment lines (KeyError if there is no such prompt)."""
    path = PROMPT_DIR / f"{name}.txt"
    if not path.is_file():
        raise KeyError(f"no prompt named {name!r} (known: {', '.join(prompt_names())})")
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "\n".join(lines).strip("\n")


def placeholders(name: str) -> frozenset[str]:
    """The placeholder names the template ``name`` uses."""
    fields = (field for _, field, _, _ in string.Formatter().parse(load_prompt(name)))
    return frozenset(field for field in fields if field is not None)


def render_prompt(name: str, **values: object) -> str:
    """The template ``name`` filled in with ``values`` (extra values are ignored).

    KeyError naming the prompt and the placeholder when a placeholder has no value.
    """
    missing = sorted(placeholders(name) - values.keys())
    if missing:
        raise KeyError(f"prompt {name!r} needs a value for placeholder {missing[0]!r} "
                       f"(missing: {', '.join(missing)})")
    return load_prompt(name).format(**values)
