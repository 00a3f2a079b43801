"""Trainer checkpoints by the clock (`trainer_checkpoints`): the one rule the reward model's and the round's trainers
share, with a clock the test moves."""

from types import SimpleNamespace

from transformers import TrainerControl

from orchrm_dagster.trainer_checkpoints import checkpoint_args, last_whole_checkpoint, timed_checkpoints


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def step_end(callback, clock, step: int, at_minute: float, last_step: int = 100) -> bool:
    clock.now = 60 * at_minute
    control = TrainerControl()
    callback.on_step_end(None, SimpleNamespace(global_step=step, max_steps=last_step), control)
    return control.should_save


def test_a_checkpoint_is_due_once_its_minutes_have_passed_since_the_last():
    clock = FakeClock()
    callback = timed_checkpoints(10, clock)
    callback.on_train_begin(None, None, None)
    assert not step_end(callback, clock, 1, 9.9)
    assert step_end(callback, clock, 2, 10.0)
    clock.now += 30  # the checkpoint took 30 s
    callback.on_save(None, None, None)
    assert not step_end(callback, clock, 3, 19.0)  # 10 minutes after the last checkpoint's end, not the start
    assert step_end(callback, clock, 4, 20.5)
    assert callback.checkpoints == 1 and callback.seconds == 30


def test_never_at_the_last_step_and_never_when_unset():
    clock = FakeClock()
    timed = timed_checkpoints(0, clock)
    assert step_end(timed, clock, 1, 0, last_step=2) and not step_end(timed, clock, 2, 60, last_step=2)
    never = timed_checkpoints(None, clock)
    assert not step_end(never, clock, 1, 10**6, last_step=2)


def test_a_checkpoint_is_timed_from_the_last_event_before_it():
    clock = FakeClock()
    callback = timed_checkpoints(0, clock)
    callback.on_train_begin(None, None, None)
    step_end(callback, clock, 1, 1.0)
    clock.now += 5  # the step's log
    callback.on_log(None, None, None)
    clock.now += 2
    callback.on_save(None, None, None)
    assert callback.seconds == 2


def test_transformers_own_schedule_is_off():
    assert checkpoint_args()["save_strategy"] == "no"


def saved(folder, step: int, state: str | None = '{"global_step": 1}'):
    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir()
    (checkpoint / "optimizer.pt").write_bytes(b"\0" * 8)
    if state is not None:
        (checkpoint / "trainer_state.json").write_text(state)
    return checkpoint


def test_a_checkpoint_a_kill_cut_short_is_removed_and_the_last_whole_one_resumes(tmp_path):
    saved(tmp_path, 9)
    saved(tmp_path, 10)
    saved(tmp_path, 11, state='{"global_st')  # killed while writing its state
    saved(tmp_path, 12, state=None)  # killed before its state
    assert last_whole_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # by step, not by name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-10", "checkpoint-9"]


def test_no_whole_checkpoint_is_none(tmp_path):
    saved(tmp_path, 3, state=None)
    assert last_whole_checkpoint(tmp_path) is None and not any(tmp_path.iterdir())
    assert last_whole_checkpoint(tmp_path / "absent") is None
