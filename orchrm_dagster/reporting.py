"""Small helpers that turn results into Markdown for Dagster metadata and the CLI."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    def cell(value) -> str:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_image(png: bytes, alt: str) -> str:
    """A PNG inline in Markdown (a data URI), as Dagster's UI renders it in asset metadata."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def figure_png(figure) -> bytes:
    """A matplotlib figure as PNG bytes (the figure is closed)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()
