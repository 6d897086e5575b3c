"""The end of a job's output file, read the way the job's user could read it (an adapter).

The agent runs as root; the output paths come from Slurm's record of the job (the helper pushes
them with the node's job list), but the files and every folder on the way are the user's to
change. So a tail is read only when:

- no folder on the way is a symbolic link that anyone but root owns (each component is opened
  with ``O_NOFOLLOW`` from its parent; a root-owned link, the site's own layout, is followed);
- the file itself is not a symbolic link (``O_NOFOLLOW``), is a regular file (not a FIFO that
  would block, not a device), and is owned by the job's user (``fstat`` on the open file): a
  hard link to another user's or root's file is refused, and what is read is what the user
  could read anyway;
- at most `TAIL_BYTES` from the end are read (never the whole file), with ``O_NONBLOCK`` and
  ``O_NOCTTY``.

Anything else is "nothing read" with one log line: the end is then judged on the node's
measurements alone.
"""
from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

TAIL_BYTES = 64 * 1024
MAX_PATH = 4096
_DIR_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC  # Linux
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class TailRefused(Exception):
    """The file is not read (a link, not the user's, not a regular file...)."""


@dataclass(frozen=True)
class Tail:
    path: str
    text: str
    size: int  # the file's size when read (the tail is its last min(size, TAIL_BYTES) bytes)


def _open_dir(path: str) -> int:
    """An O_PATH descriptor of the folder ``path``, walking from / one component at a time:
    a symbolic link on the way is followed only when root owns it."""
    fd = os.open("/", _DIR_FLAGS | os.O_DIRECTORY)
    try:
        for part in [p for p in path.split("/") if p]:
            if part == "..":
                raise TailRefused(f"'..' in {path!r}")
            if part == ".":
                continue
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise TailRefused(f"{part!r} in {path!r}: {exc.strerror}") from exc
            st = os.fstat(nxt)
            if stat.S_ISLNK(st.st_mode):
                os.close(nxt)  # O_PATH | O_NOFOLLOW opened the link itself: st is the link's
                if st.st_uid != 0:
                    raise TailRefused(f"{part!r} in {path!r} is a symbolic link owned by uid {st.st_uid}")
                try:
                    nxt = os.open(part, (_DIR_FLAGS & ~os.O_NOFOLLOW) | os.O_DIRECTORY, dir_fd=fd)
                except OSError as exc:
                    raise TailRefused(f"{part!r} in {path!r}: {exc.strerror}") from exc
            elif not stat.S_ISDIR(st.st_mode):
                os.close(nxt)
                raise TailRefused(f"{part!r} in {path!r} is not a folder")
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_tail(path: str, uid: int, max_bytes: int = TAIL_BYTES) -> Tail:
    """The last ``max_bytes`` of the file at ``path`` (absolute) owned by ``uid``; TailRefused
    when it may not be read (see the module's rules)."""
    if not isinstance(uid, int) or isinstance(uid, bool) or uid < 0:
        raise ValueError(f"uid must be a non-negative integer, got {uid!r}")
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    if not path.startswith("/") or len(path) > MAX_PATH or "\0" in path:
        raise TailRefused(f"not an absolute path: {path[:200]!r}")
    folder, _, name = path.rstrip("/").rpartition("/")
    if not name or name in (".", ".."):
        raise TailRefused(f"no file name in {path!r}")
    dir_fd = _open_dir(folder or "/")
    try:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise TailRefused(f"{path!r} is a symbolic link") from exc
            raise TailRefused(f"{path!r}: {exc.strerror}") from exc
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TailRefused(f"{path!r} is not a regular file")
        if st.st_uid != uid:
            raise TailRefused(f"{path!r} is owned by uid {st.st_uid}, not the job's user {uid}")
        start = max(0, st.st_size - max_bytes)
        data = os.pread(fd, max_bytes, start)
    finally:
        os.close(fd)
    return Tail(path, data.decode("utf-8", errors="replace"), st.st_size)


def read_tails(paths: Iterable[str], uid: int, max_bytes: int = TAIL_BYTES) -> list[Tail]:
    """Each distinct path's tail that may be read (the others logged and skipped)."""
    out: list[Tail] = []
    for path in dict.fromkeys(p for p in paths if p):
        try:
            out.append(read_tail(path, uid, max_bytes))
        except TailRefused as exc:
            log.warning("job output not read: %s", exc)
    return out
