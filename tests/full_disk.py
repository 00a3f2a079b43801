"""A small disk to fill: a tmpfs mounted for one test (which skips, saying why, where the machine cannot mount one:
not root, no CAP_SYS_ADMIN), holding a storage root and a ballast file grown to leave a chosen number of bytes
free, then deleted to give the space back. Writes past the room left fail with a real ENOSPC from the kernel."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PAGE = 4096  # tmpfs hands out space a page at a time


@dataclass(frozen=True)
class SmallDisk:
    mount: Path

    @property
    def root(self) -> Path:
        """The storage root on it."""
        return self.mount / "storage"

    @property
    def ballast(self) -> Path:
        return self.mount / "ballast"

    def free(self) -> int:
        status = os.statvfs(self.mount)
        return status.f_bavail * status.f_frsize

    def leave(self, free_bytes: int) -> None:
        """Grows (or shrinks) the ballast so that `free_bytes`, rounded down to a page, are left free."""
        size = self.ballast.stat().st_size if self.ballast.exists() else 0
        target = size + self.free() - free_bytes // PAGE * PAGE
        if target < 0:
            raise ValueError(f"{self.mount} cannot leave {free_bytes} bytes free: it holds {self.free()} without "
                             f"ballast")
        with open(self.ballast, "ab") as ballast:
            if target > size:
                os.posix_fallocate(ballast.fileno(), size, target - size)
            else:
                ballast.truncate(target)

    def give_back(self) -> None:
        """The ballast deleted: the space is back."""
        self.ballast.unlink(missing_ok=True)


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True)


def mount_small_disk(folder: Path, size: int) -> SmallDisk:
    """A tmpfs of `size` bytes mounted on `folder` (which must exist), holding an empty storage root; the test skips,
    saying why, where it cannot be mounted."""
    try:
        done = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder))
    except FileNotFoundError as missing:
        pytest.skip(f"cannot mount a tmpfs here: {missing}")
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"mount exited with {done.returncode}"])[0]
        pytest.skip(f"cannot mount a tmpfs here: {why} (mounting needs root, or CAP_SYS_ADMIN)")
    disk = SmallDisk(folder)
    disk.root.mkdir()
    return disk


def unmount(folder: Path) -> None:
    if _run("umount", str(folder)).returncode != 0:
        _run("umount", "-l", str(folder))  # a file still open in it: detached now, freed once it closes


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Callable[[int], SmallDisk]]:
    """`small_disk(size)`: a tmpfs of `size` bytes (`mount_small_disk`), unmounted after the test."""
    mounted: list[Path] = []

    def mount(size: int) -> SmallDisk:
        folder = tmp_path / f"disk{len(mounted)}"
        folder.mkdir()
        disk = mount_small_disk(folder, size)
        mounted.append(folder)
        return disk

    yield mount
    for folder in reversed(mounted):
        unmount(folder)
