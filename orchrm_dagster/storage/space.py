"""A write that found no room, said once for every writer: a full file system (ENOSPC), a used-up quota (EDQUOT) or
a file-size limit (EFBIG) met while writing a batch, a checkpoint or a table is raised as `DiskFull`, whose message
names what was being written, where, and what to do (`writing`)."""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# errno -> (what happened, what to do before running the step again)
_CAUSES = {
    errno.ENOSPC: ("no space left on device", "free space"),
    errno.EDQUOT: ("disk quota exceeded", "free space or raise the quota"),
    errno.EFBIG: ("file too large", "raise the file-size limit (the file system's, or ulimit -f)"),
}
# Writers that keep the cause in their words only: safetensors ("os error 28"), DuckDB, a training process's last line
_SAID = (
    (re.compile(r"no space left on device|os error 28\b", re.IGNORECASE), errno.ENOSPC),
    (re.compile(r"disk quota exceeded|os error 122\b", re.IGNORECASE), errno.EDQUOT),
    (re.compile(r"file too large|os error 27\b", re.IGNORECASE), errno.EFBIG),
)
# torch's checkpoint writer loses the cause altogether ("unexpected pos 704 vs 598", "iostream error"): such an error
# counts as a full disk when the disk it wrote to is full now
_TORCH_WRITER = re.compile(r"PytorchStreamWriter|inline_container|iostream error")
_FULL_BELOW_BYTES = 1 << 20


class DiskFull(OSError):
    """A write that found no room; `errno` is the cause's (ENOSPC, EDQUOT or EFBIG), the message says the rest."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.errno = code  # set alone, so the message stays the whole text (no "[Errno 28]" prefix)

    def __reduce__(self):  # as it came: from a worker process (an ingest's, a data-parallel training's)
        return DiskFull, (str(self), self.errno)


@contextmanager
def writing(what: str, path: str | os.PathLike) -> Iterator[None]:
    """The block writes `what` (a reader's words: "run batch b7 (runs)") to `path` (a file, or the folder it writes
    into); a full disk met there raises DiskFull: `no space left on device writing run batch b7 (runs) to
    /root/tables/runs/batch_id=b7 (g…/part-0000.parquet): free space and run the step again`, the file in brackets
    where the error names it. Any other error goes through as it is. The new error keeps the write's traceback, not
    the original as its cause: a step's failure shows its innermost cause, which would be the bare "[Errno 28]"."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as error:
        code = full_disk_errno(error, path)
        if code is None:
            raise
        message = disk_full_message(what, path, code, _failed_file(error, path))
        raise DiskFull(message, code).with_traceback(error.__traceback__) from None


def full_disk_errno(error: BaseException, path: str | os.PathLike) -> int | None:
    """ENOSPC, EDQUOT or EFBIG when `error` (or an error it came from) is a write that found no room at `path`;
    None for any other error."""
    for link in _chain(error):
        if isinstance(link, OSError) and link.errno in _CAUSES:
            return link.errno
        text = str(link)
        for pattern, code in _SAID:
            if pattern.search(text):
                return code
        if _TORCH_WRITER.search(text) and free_bytes(path) < _FULL_BELOW_BYTES:
            return errno.ENOSPC
    return None


def disk_full_message(what: str, path: str | os.PathLike, code: int, file: str | None = None) -> str:
    cause, remedy = _CAUSES[code]
    return f"{cause} writing {what} to {path}{f' ({file})' if file else ''}: {remedy} and run the step again"


def free_bytes(path: str | os.PathLike) -> int:
    """The bytes free to this user on the file system of `path` (or of its nearest folder that exists)."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


_QUOTED_PATH = re.compile(r"""["'](/[^"']+)["']""")


def _failed_file(error: BaseException, path: str | os.PathLike) -> str | None:
    """The file under folder `path` whose write failed, relative to it, where the error names it (a copy's
    destination, DuckDB's quoted path; safetensors and torch name none)."""
    folder = os.path.abspath(path)
    named = []
    for link in _chain(error):
        named += [getattr(link, "filename2", None), getattr(link, "filename", None), *_QUOTED_PATH.findall(str(link))]
    for name in named:
        if isinstance(name, str) and os.path.abspath(name).startswith(folder + os.sep):
            return os.path.relpath(os.path.abspath(name), folder)
    return None
