"""Prompt templates of the sub-agents and the orchestrator, one ``<name>.txt`` file each; a template may also be a
file anywhere (named by its path: a name holding a folder or a suffix), as a team's own orchestrator prompt is.

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


def is_prompt_file(name: str) -> bool:
    """Whether ``name`` is a path to a prompt file rather than the name of a shipped prompt."""
    return "/" in name or "\\" in name or Path(name).suffix != ""


def prompt_path(name: str) -> Path:
    """The file of the template ``name`` (KeyError if there is none)."""
    if is_prompt_file(name):
        path = Path(name).expanduser()
        if not path.is_file():
            raise KeyError(f"no prompt file {name} (a prompt is a file's path, or one of: {', '.join(prompt_names())})")
        return path
    path = PROMPT_DIR / f"{name}.txt"
    if not path.is_file():
        raise KeyError(f"no prompt named {name!r} (known: {', '.join(prompt_names())}; or a file's path)")
    return path


def load_prompt(name: str) -> str:
    """The template ``name`` without its leading comment lines (KeyError if there is no such prompt); a file is read
    again when it changed."""
    path = prompt_path(name)
    stat = path.stat()
    return _template(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _template(path: str, mtime_ns: int, size: int) -> str:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
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
