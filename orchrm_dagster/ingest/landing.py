"""What the landing-zone sensor decides, apart from Dagster: which landed files are new or changed."""

from __future__ import annotations

import json

from orchrm_dagster.storage import LandedFile


def parse_cursor(cursor: str | None) -> dict[str, str]:
    return json.loads(cursor) if cursor else {}


def new_or_changed(landed: list[LandedFile], seen: dict[str, str]) -> list[LandedFile]:
    return [f for f in landed if seen.get(f.name) != f.fingerprint]


def not_yet_ingested(fresh: list[LandedFile], ingested_fingerprints: dict[str, str | None]) -> list[LandedFile]:
    """Drop files whose exact content was already ingested (by the CLI, say) before the sensor saw them."""
    return [f for f in fresh if ingested_fingerprints.get(f.batch_id) != f.fingerprint]


def advance_cursor(seen: dict[str, str], handled: list[LandedFile]) -> str:
    return json.dumps({**seen, **{f.name: f.fingerprint for f in handled}}, sort_keys=True)
