"""A real full disk for the storage tests: a small tmpfs mounted over a test's directory.

Only root may mount one; elsewhere the tests that need it skip with a one-line reason.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(path: Path, size: str = "4m", read_only: bool = False) -> Iterator[Path]:
    """``path`` as the mount point of a tmpfs of ``size`` bytes (``4m``, ``512k``), unmounted afterwards;
    ``read_only``: mounted read-only (every write refused with EROFS, root's too)."""
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command here, so no small disk to fill")
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({done.stderr.strip() or done.returncode})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` to the last byte, then free ``leave`` bytes again (tmpfs counts whole pages).

    Commands run inside the test's process leave their index connections to
    the garbage collector; one still open keeps a deleted index's pages in
    use, and its collection mid-test would free them.  Collected first, so
    the disk is as full as a real command, whose process has exited, finds it.
    """
    gc.collect()
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                if os.write(fd, chunk) < len(chunk):
                    chunk = chunk[:4096]
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
                if len(chunk) <= 4096:
                    break
                chunk = chunk[:4096]
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler
