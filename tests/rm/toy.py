"""Tiny pairs whose winner is learnable in a few steps: the chosen plan runs a DebateAgent, the rejected one does not."""

import random

from orchrm_dagster.rm.data import PairTexts

_OTHER_AGENTS = ("CoTAgent", "SCAgent", "ReflexionAgent", "WebSearchAgent")
_TOPICS = ("apples", "trains", "coins", "marbles", "tickets", "books", "eggs", "bikes")


def toy_pairs(n: int, seed: int) -> PairTexts:
    rng = random.Random(seed)
    rows = [_toy_pair(rng, f"toy-{seed}-{i}") for i in range(n)]
    return PairTexts(*(list(column) for column in zip(*rows))) if rows else PairTexts.empty()


def _toy_pair(rng: random.Random, pair_id: str):
    question = f"How many {rng.choice(_TOPICS)} are left if {rng.randint(2, 99)} of {rng.randint(100, 999)} are gone?"
    follow_up = rng.choice(_OTHER_AGENTS)
    chosen = f"<agent_name>DebateAgent</agent_name> then <agent_name>{follow_up}</agent_name>"
    rejected = f"<agent_name>{rng.choice(_OTHER_AGENTS)}</agent_name> then <agent_name>{follow_up}</agent_name>"
    source = rng.choice(("specialized_over_base", "correct_over_incorrect"))
    return pair_id, question, chosen, rejected, source


# The champion floor off but for its minimum of one validation pair: for tests of something else that train a tiny
# model on a handful of toy pairs, which shows nothing significant (tests/rm/test_domains.py tests the floor).
NO_FLOOR = {"min_validation_pairs": 1, "champion_level": 1.0}
