"""How landed files are cut into run batches (loop.batching): what lands together goes together, bounded by count
and size, at a bounded rate, so batches (runs, partitions) follow the runs and not the files."""

from hypothesis import given, settings as hsettings, strategies as st

from orchrm_dagster.loop import BatchingSettings, cut_batches
from orchrm_dagster.storage import LandedFile, batch_id_for

SETTINGS = BatchingSettings(max_files=10, max_bytes=10_000, alone_bytes=5_000, interval_s=600, burst=2, settle_s=5)


def landed(name: str, at: float, size: int = 100) -> LandedFile:
    return LandedFile(name, f"/landing/{name}", size, f"{size}:{at}", at)


def test_a_settled_drop_of_small_files_is_one_batch_named_after_when_it_landed():
    drop = [landed(f"worker-{i}.jsonl", 1000.0 + i * 0.01) for i in range(7)]
    cut = cut_batches(drop, (), now=1010.0, settings=SETTINGS)
    [batch] = cut.batches
    assert batch.files == tuple(sorted(f.name for f in drop)) and batch.paced and cut.waiting == 0
    assert batch.batch_id.startswith("landed-19700101T001640Z-7files-") and "." not in batch.batch_id


def test_a_drop_still_landing_waits_for_it_to_settle():
    drop = [landed("a.jsonl", 1000.0), landed("b.jsonl", 1003.0)]
    cut = cut_batches(drop, (), now=1004.0, settings=SETTINGS)
    assert cut.batches == () and cut.waiting == 2 and cut.next_at == 1008.0


def test_a_lone_small_file_is_a_batch_named_after_it():
    [batch] = cut_batches([landed("day 1.jsonl", 0.0)], (), now=100.0, settings=SETTINGS).batches
    assert batch.batch_id == batch_id_for("day 1.jsonl") and batch.files == ("day 1.jsonl",)


def test_a_large_file_goes_alone_at_once_and_does_not_count_against_the_rate():
    files = [landed("big.jsonl", 99.9, size=5_000), landed("small.jsonl", 99.9)]
    cut = cut_batches(files, (), now=100.0, settings=SETTINGS)  # small.jsonl has not settled
    assert [(b.batch_id, b.files, b.paced) for b in cut.batches] == [("big.jsonl", ("big.jsonl",), False)]
    assert cut.waiting == 1


def test_full_batches_go_at_once_whatever_the_rate_and_the_rest_waits_for_it():
    files = [landed(f"f{i:02d}.jsonl", 50.0 + i) for i in range(25)]
    spent = (90.0, 95.0)  # the burst of 2 was spent just now
    cut = cut_batches(files, spent, now=100.0, settings=SETTINGS)
    assert [len(b.files) for b in cut.batches] == [10, 10] and not any(b.paced for b in cut.batches)
    assert cut.waiting == 5 and cut.next_at == 90.0 + 600  # the bucket's first token back
    assert [f.name for f in files[:20]] == sorted(name for b in cut.batches for name in b.files)  # landing order


def test_max_bytes_closes_a_batch():
    files = [landed(f"f{i}.jsonl", float(i), size=4_000) for i in range(5)]
    cut = cut_batches(files, (), now=1000.0, settings=SETTINGS)
    assert [len(b.files) for b in cut.batches] == [2, 2, 1]


def test_the_rate_lets_a_burst_through_then_one_batch_an_interval():
    cuts: list[float] = []
    for now in (0.0, 10.0, 20.0, 30.0, 600.0, 610.0):
        cut = cut_batches([landed(f"at-{now}.jsonl", now - 10)], tuple(cuts), now=now, settings=SETTINGS)
        if cut.batches:
            cuts.append(now)
    assert cuts == [0.0, 10.0, 600.0]  # the burst (2), then a token back an interval after the first


TICK_S = 30.0


@hsettings(max_examples=60, deadline=None)
@given(arrivals=st.lists(st.tuples(st.floats(0, 400), st.integers(1, 3_000)), min_size=1, max_size=120))
def test_every_file_is_cut_once_within_the_interval_and_batches_stay_bounded(arrivals):
    """A simulated day of landings (gaps and sizes from outside), the loop ticking every 30 s: every file is cut
    into exactly one batch, none waits longer than interval_s and a tick, each batch keeps the bounds, and the
    batches the rate cuts are at most burst + elapsed / interval_s."""
    files, at = [], 0.0
    for index, (gap, size) in enumerate(arrivals):
        at += gap
        files.append(landed(f"f{index:04d}.jsonl", at, size))
    pending, cuts, batches, cut_at = [], [], [], {}
    now, arrived = 0.0, 0
    end = at + SETTINGS.interval_s + 2 * TICK_S
    while now <= end:
        while arrived < len(files) and files[arrived].landed_at <= now:
            pending.append(files[arrived])
            arrived += 1
        cut = cut_batches(pending, tuple(cuts), now, SETTINGS)
        for batch in cut.batches:
            batches.append(batch)
            cuts += [now] if batch.paced else []
            cut_at.update(dict.fromkeys(batch.files, now))
        taken = {name for batch in cut.batches for name in batch.files}
        pending = [f for f in pending if f.name not in taken]
        now += TICK_S
    names = [name for batch in batches for name in batch.files]
    assert sorted(names) == [f.name for f in files]  # each once
    sizes = {f.name: f.size for f in files}
    for batch in batches:
        assert len(batch.files) <= SETTINGS.max_files
        assert len(batch.files) == 1 or sum(sizes[n] for n in batch.files) <= SETTINGS.max_bytes
    assert all(cut_at[f.name] - f.landed_at <= SETTINGS.interval_s + TICK_S for f in files)
    assert len(cuts) <= SETTINGS.burst + (end - files[0].landed_at) / SETTINGS.interval_s + 1


@hsettings(max_examples=100, deadline=None)
@given(names=st.lists(st.text(min_size=1, max_size=30).map(lambda t: t.replace("/", "_") + ".jsonl"),
                      min_size=2, max_size=30, unique=True))
def test_a_batch_id_is_safe_and_never_a_files_own(names):
    """Names from outside: a batch of several files gets a folder-safe id that no file's own batch id can equal."""
    [batch] = cut_batches([landed(n, 0.0) for n in names], (), now=100.0, settings=BatchingSettings()).batches
    assert all(c.isalnum() or c in "._-" for c in batch.batch_id)
    assert batch.batch_id not in {batch_id_for(n) for n in names} and sorted(batch.files) == sorted(names)
