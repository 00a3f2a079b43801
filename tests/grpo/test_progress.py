"""A round says where it is: the phase, k of N, and what is left of the phase and of the round, when a phase starts,
as it advances, and at least every `every_s` seconds when nothing moves."""

from orchrm_dagster.grpo.progress import Planned, RoundProgress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_round_says_its_phase_how_far_and_what_is_left():
    said, clock = [], Clock()
    progress = RoundProgress(said.append, "round 1", every_s=30, clock=clock)
    progress.plan([Planned("held-out", 128), Planned("training", 6), Planned("held-out", 128)])
    progress.begin("held-out plans of base", "held-out", 128, "plans sampled")
    assert said == ["round 1: held-out plans of base: 0 of 128 plans sampled (0.0 s)"]
    clock.now = 64.0
    progress.advance(to=32)  # 2 s a plan: 3 min 12 s left in it; the training's rate is not known yet
    assert said[-1] == "round 1: held-out plans of base: 32 of 128 plans sampled (1 min 04 s, about 3 min 12 s left in it)"
    clock.now = 256.0
    progress.advance(to=128)
    progress.begin("training", "training", 6, "optimizer steps")
    clock.now = 316.0
    progress.advance()  # 60 s a step: 5 min left in it, then 128 held-out plans at 2 s each
    assert said[-1].endswith("(1 min 00 s, about 5 min 00 s left in it, about 9 min 16 s left in the round)")


def test_a_phase_that_does_not_move_is_still_said_every_interval():
    said, clock = [], Clock()
    progress = RoundProgress(said.append, "round 2", every_s=30, clock=clock)
    progress.begin("training", "training", 6, "optimizer steps")
    clock.now = 29.0
    progress.heartbeat()
    assert len(said) == 1  # nothing for 29 s: nothing more said
    clock.now = 31.0
    progress.heartbeat()
    assert len(said) == 2 and said[-1] == "round 2: training: 0 of 6 optimizer steps (31 s)"
    clock.now = 40.0
    progress.advance()  # a step done within the interval: said at the next beat, not now
    assert len(said) == 2
    clock.now = 62.0
    progress.heartbeat()
    assert said[-1].startswith("round 2: training: 1 of 6 optimizer steps (1 min 02 s, about 5 min 10 s left in it")
