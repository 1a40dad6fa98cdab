"""Crash-safe file primitives shared by every store in sluice.

Durable files are replaced atomically (temp file in the same directory, fsync,
rename, fsync of the directory) so a reader sees either the old or the new
version.  Logs are appended with :func:`append_bytes`: every record of one
call in one ``write()`` on an ``O_APPEND`` descriptor (concurrent appenders
never interleave inside a line), all or nothing (a short or failed write is
cut back to the previous length), and fsynced before the call returns, so
what a command acknowledges survives a power cut.  One call is one fsync,
however many records it writes: a 10,000-item sling costs one per file.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

from sluice.errors import ConfigError, LockBusy, StorageError
from sluice.logs import log


def storage_error(path: Path, err: OSError, doing: str = "write", after: str = "") -> StorageError:
    """The :class:`~sluice.errors.StorageError` for a refusal of the operating system on ``path``."""
    if isinstance(err, StorageError):
        return err
    reason = err.strerror or str(err)
    return StorageError(path, f"cannot {doing} it: {reason}{after}", err.errno)


#: The most bytes sluice reads of an item source (a beads export, a command's output or its snapshot,
#: a rig's own store): 1 GiB, ten times the largest export seen.  A larger file, or one that grows
#: past it while it is read (``/dev/zero``, a writer that never stops), is named, never read on.
MAX_SOURCE_BYTES = 1 << 30
#: The most bytes read of a file people edit (the town's config, the policy, the town registry).
MAX_EDITED_BYTES = 64 << 20
#: The most bytes read of a small file that points somewhere (git's ``HEAD``, ``commondir``, a
#: worktree's ``gitdir``) or of a source's state.
MAX_SMALL_BYTES = 1 << 20


class NotRegularFile(OSError):
    """A path that should be a file and is a FIFO, a device, a socket, a directory, a symbolic link
    loop, or a file too large to read; ``str()`` names the path and what is wrong with it."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}" if self.filename else str(self.strerror)


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def size_text(size: int) -> str:
    """``1 GiB``, ``64 KiB`` or ``100 bytes``: a limit as a person reads it."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def _refusal(path: Path | str, mode: int, size: int, limit: int, os_words: bool) -> OSError | None:
    """Why a file of this mode and size is not read (None: it may be), naming a link's target.

    ``os_words``: a directory is what opening it would have said (``Is a directory``), as the
    readers of items files have always said it.
    """
    if os_words and stat.S_ISDIR(mode):
        return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if stat.S_ISREG(mode):
        if size <= limit:
            return None
        text = f"is larger than {size_text(limit)} ({size} bytes), more than sluice reads of it"
        return NotRegularFile(errno.EFBIG, text, str(path))
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    with contextlib.suppress(OSError):
        if os.path.islink(path):
            kind += f" (a symbolic link to {os.readlink(path)})"
    return NotRegularFile(errno.EINVAL, f"is {kind}, not a regular file", str(path))


def _loop(path: Path | str, err: OSError) -> OSError:
    """A symbolic link loop as a :class:`NotRegularFile` naming it; any other refusal as it is."""
    if err.errno == errno.ELOOP:
        return NotRegularFile(errno.ELOOP, "is a symbolic link loop (or a chain of links too long"
                              " to follow)", str(path))
    return err


def check_regular(path: Path | str, limit: int | None = None, os_words: bool = True) -> os.stat_result | None:
    """``path``'s stat when it is a regular file of at most ``limit`` bytes (default
    :data:`MAX_SOURCE_BYTES`); None when there is none; else :class:`NotRegularFile` naming it
    (a directory: ``IsADirectoryError``, unless not ``os_words``).

    Nothing is opened, so a FIFO or a device costs a ``stat``, never a wait.
    """
    limit = MAX_SOURCE_BYTES if limit is None else limit
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _loop(path, err) from None
    refusal = _refusal(path, found.st_mode, found.st_size, limit, os_words)
    if refusal is not None:
        raise refusal
    return found


class _Bounded(io.RawIOBase):
    """A file read through an open descriptor that refuses to give more than ``limit`` bytes."""

    def __init__(self, fd: int, path: Path | str, limit: int):
        self._file = io.FileIO(fd, "rb", closefd=True)
        self._path, self._limit, self._left = str(path), limit, limit

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._file.fileno()

    def readinto(self, buffer) -> int | None:
        got = self._file.readinto(buffer)
        if got:
            self._left -= got
            if self._left < 0:
                raise NotRegularFile(errno.EFBIG, f"grew past {size_text(self._limit)} while it was read,"
                                     " more than sluice reads of it", self._path)
        return got

    def close(self) -> None:
        self._file.close()
        super().close()


def _open_checked(path: Path | str, limit: int, os_words: bool) -> int:
    """A descriptor of ``path`` open for reading, once it is known to be a regular file of at most
    ``limit`` bytes; :class:`NotRegularFile` (or the OSError of the open) when it is not.

    Looked at before it is opened (opening a device can do things: rewind a tape, arm a
    watchdog), opened without blocking (a FIFO put there in between would otherwise wait for a
    writer for ever) and looked at again on the open descriptor, so no rename in between slips
    another kind of file in.
    """
    if check_regular(path, limit, os_words) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise _loop(path, err) from None
    try:
        found = os.fstat(fd)
        refusal = _refusal(path, found.st_mode, found.st_size, limit, os_words)
        if refusal is not None:
            raise refusal
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_source(path: Path | str, limit: int | None = None) -> io.BufferedReader:
    """``path`` opened for reading when it is a regular file of at most ``limit`` bytes (default
    :data:`MAX_SOURCE_BYTES`); else :class:`NotRegularFile` naming it (FileNotFoundError: none there).

    A FIFO, a device or a socket is named, never opened or waited on
    (:func:`_open_checked`); the reader raises :class:`NotRegularFile` when the
    file grows past the limit while it is read.
    """
    limit = MAX_SOURCE_BYTES if limit is None else limit
    fd = _open_checked(path, limit, os_words=True)
    try:
        return io.BufferedReader(_Bounded(fd, path, limit), 1 << 16)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, limit: int | None = None) -> bytes:
    """The bytes of ``path`` when it is a regular file (or a link to one) of at most ``limit`` bytes
    (default :data:`MAX_EDITED_BYTES`); else :class:`NotRegularFile` (see :func:`open_source`).

    A FIFO would block a plain read forever and ``/dev/zero`` would fill the
    memory, so the file's kind is checked before it is opened and again on the
    open descriptor, and no more than ``limit`` bytes are ever read.
    """
    limit = MAX_EDITED_BYTES if limit is None else limit
    fd = _open_checked(path, limit, os_words=False)
    try:
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(1 << 20, left))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    if left <= 0:
        raise NotRegularFile(errno.EFBIG, f"grew past {size_text(limit)} while it was read,"
                             " more than sluice reads of it", str(path))
    return b"".join(chunks)


def read_edited(path: Path, kind: str) -> bytes | None:
    """The bytes of a file people edit (the town's ``config``, the ``policy``); None when there is none.

    Whatever else keeps it from being read is a :class:`~sluice.errors.ConfigError` naming the file;
    so is a symbolic link to nothing, a mistake to name rather than read as no file.
    """
    try:
        return read_regular(path)  # a FIFO or /dev/zero is named, never waited on or read forever
    except FileNotFoundError:
        if not os.path.islink(path):
            return None
        target = os.readlink(path)
        raise ConfigError(f"{path}: is a symbolic link to {target}, which does not exist") from None
    except NotRegularFile as err:
        raise ConfigError(f"{path}: {err.strerror}; the {kind} must be a JSON file") from None


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` by a rename; ``durable``: fsync the data before it and the directory after."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _temporary_beside(path)
    except OSError as err:
        raise storage_error(path, err) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise storage_error(path, err) from None
        raise
    if durable:
        fsync_dir(path.parent)


def _temporary_beside(path: Path) -> tuple[int, str]:
    """A new file ``.<name>.<pid>.<random>.tmp`` in ``path``'s directory, opened for writing, mode 0600.

    What ``tempfile.mkstemp`` does, without importing it (with ``shutil``,
    ``random`` and the compressors, about 5 ms): a read command that keeps a
    cache writes one such file, and answers in a few times that.
    """
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))


def write_cache(path: Path, data: bytes) -> None:
    """Replace a cache file atomically, or not at all: a cache that cannot be written
    (a read-only or full runtime directory) only costs the next reader its speed.

    Not fsynced: a power cut may leave the old cache, or an empty or cut one,
    which every reader takes for no cache (each checks what it reads), so
    durability would buy nothing and cost a cycle two fsyncs per cache.
    """
    with contextlib.suppress(OSError):
        atomic_write_bytes(path, data, durable=False)


def file_signature(path: Path) -> str | None:
    """A file's inode, size and modification time as one text; None when it does not exist.

    A path that cannot even be looked at (a symbolic link loop) has a text of
    its own, never an error: whoever reads the file says what is wrong with it.

    What a copy derived from a file is keyed by (an items file's index, a
    repository's warmth, a live view): a rewrite by rename changes the inode,
    an append the size, an edit in place the time.
    """
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as err:  # a symbolic link loop, a path through a file: a text no file has
        return f"unreadable:{err.errno}"
    return stat_signature(found)


def stat_signature(found: os.stat_result) -> str:
    """:func:`file_signature` of a file already looked at."""
    return f"{found.st_ino}:{found.st_size}:{found.st_mtime_ns}"


def atomic_write_json(path: Path, obj: Any, mode: int = 0o644) -> None:
    data = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, data.encode("utf-8"), mode)


def append_bytes(path: Path, data: bytes, mode: int = 0o644, mend: bool = True) -> None:
    """Append ``data`` whole and durably, or not at all; the caller holds the owning lock.

    The bytes go in one ``write()``; the file is fsynced before this returns
    (and its directory too when the append created it), so an acknowledged
    change survives a power cut.  A short or failed write, or a failed
    fsync, cuts the file back to its length before the call and raises a
    :class:`~sluice.errors.StorageError` naming the file: a batch is never
    left half-written.  ``mend`` first cuts off a torn last line of a log
    (see :func:`mend_torn_tail`); a log of plain text lines has none to mend.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if mend:
            mend_torn_tail(path)
        created = not os.path.exists(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    except OSError as err:
        raise storage_error(path, err) from None
    try:
        start = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):  # a full disk takes what fits
                fit = f"{os.strerror(errno.ENOSPC)} (only {written} of {len(data)} bytes fit)"
                raise OSError(errno.ENOSPC, fit)
            os.fsync(fd)
        except OSError as err:
            _cut_back(fd, start)
            raise storage_error(path, err, "append to", "; nothing of this change was written") from None
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def _cut_back(fd: int, length: int) -> None:
    """Undo a failed append: the file ends where it ended before (best effort, durable if it can be)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, length)
        os.fsync(fd)


def append_line(path: Path, line: str) -> None:
    """Append one record durably (:func:`append_bytes`); the caller holds the owning lock."""
    if "\n" in line:
        raise ValueError("a log record must be a single line")
    append_bytes(path, (line + "\n").encode("utf-8"), mend=False)


def append_json(path: Path, obj: Any, lock: Path | None = None) -> None:
    """Append one compact JSON record, under ``lock`` when given (else the caller holds the owning one).

    A torn last line is mended first, so the record cannot fuse with it and vanish.
    """
    data = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
    with file_lock(lock) if lock is not None else contextlib.nullcontext():
        append_bytes(path, data)


def mend_torn_tail(path: Path) -> None:
    """Before appending to a log: cut off a torn final fragment so it cannot fuse with the new line.

    A crash in the middle of an append leaves a last line without its newline.
    Appending after it would glue the new record onto the fragment and turn a
    harmless torn tail into a corrupt line in the middle of the log.  A
    fragment that does not parse is dropped (with a warning); a complete
    record that only lacks its newline gets one.  Only the end of the file is
    read, so appends do not cost more as the log grows.  The caller holds the
    log's lock.
    """
    try:
        fh = open(path, "r+b")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return
    with fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        # Walk back to the last newline; a torn line is at most one record long.
        cut, chunk = size, 1 << 16
        while cut > 0:
            start = max(0, cut - chunk)
            fh.seek(start)
            block = fh.read(cut - start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                cut = start + newline + 1
                break
            cut = start
        fh.seek(cut)
        tail = fh.read()
        try:
            json.loads(tail)
        except (ValueError, RecursionError):
            log.warning("%s: dropping a torn last line before appending", path)
            fh.truncate(cut)
        else:  # a complete record that only lacks its newline
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")


class FileLock:
    """An exclusive ``flock`` on a lock file, held while in a ``with`` block.

    Every lock sluice takes is one of these.  Waiting is polling with a short
    sleep, so a lock never blocks past ``timeout`` seconds (0: try once;
    negative: wait for ever); a lock still busy then is a
    :class:`~sluice.errors.LockBusy` naming the file, a ``SluiceError`` like
    every other refusal.  ``flock`` belongs to the open file, so the kernel
    drops it when its holder dies (``kill -9`` included), and two locks on one
    path conflict even inside one process (one per thread, or a test holding
    the lock of a command it runs).  A lock object is not re-entrant.
    """

    POLL = 0.05

    def __init__(self, path: str, timeout: float = 30.0):
        self.lock_file = path
        self.timeout = timeout
        self._fd: int | None = None

    def acquire(self) -> FileLock:
        import fcntl
        import time

        if self._fd is not None:
            raise RuntimeError(f"{self.lock_file} is already held by this lock")
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if self.timeout >= 0 and time.monotonic() >= deadline:
                        raise LockBusy(self.lock_file) from None
                    time.sleep(self.POLL)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor of the open file drops its flock

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()


def file_lock(path: Path, timeout: float = 30.0) -> FileLock:
    """A lock on ``path`` (``with file_lock(p): ...``); LockBusy after ``timeout`` seconds."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path), timeout=timeout)


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable (its entry, not only its data)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
