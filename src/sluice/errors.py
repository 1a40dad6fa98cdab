"""Every error sluice raises on purpose.

The library raises these; only the CLI (and the MCP server) turn them into
messages and exit codes.  ``exit_code`` says which: 1 for a domain error (the
request was understood but cannot be done), 2 for a usage error.
"""

from __future__ import annotations


class SluiceError(Exception):
    """Root of every sluice error; the message is meant for a person.

    Messages name parameters as the Python API spells them (``batch``,
    ``graph_id``, ``force``), never as command-line flags: ``parameters``
    lists the ones a message names, so a surface can say its own spelling
    (the CLI says ``--batch``, ``--graph-id``, ``--force``).
    """

    exit_code = 1

    def __init__(self, *args: object, parameters: tuple[str, ...] = ()):
        super().__init__(*args)
        self.parameters = parameters


class UsageError(SluiceError):
    """The request itself is malformed (bad flag value, bad argument)."""

    exit_code = 2


class TextRefused(UsageError):
    """A text argument the API will not take: it cannot be encoded (a lone surrogate), or it is longer
    than its cap.  The message names the argument and never repeats it whole; a web surface answers
    400, the command line exits 2, an MCP tool returns an error."""


class ConfigError(SluiceError):
    """A config, policy or state file is missing, corrupt or holds a bad value."""


class TownNotFound(SluiceError):
    """No town could be located from the path given, SLUICE_TOWN or the cwd."""


class UnknownRig(SluiceError):
    """A rig name that is not registered in the town."""


class UnknownItem(SluiceError):
    """An item id that no rig store holds."""


class StoreCorrupt(SluiceError):
    """A store file has a malformed line that is not a torn last line."""

    def __init__(self, path, line: int, detail: str):
        self.path = path
        self.line = line
        super().__init__(f"{path}:{line}: {detail}")


class StorageError(SluiceError, OSError):
    """The machine refused to read or write a sluice file (disk full, I/O error, read-only, locked).

    Names the file and says what was kept: a failed append was rolled back,
    so the command changed nothing it did not report.  Also an ``OSError``
    (with the refusal's ``errno``), so code that treats any refusal of the
    operating system alike keeps doing so.
    """

    def __init__(self, path, reason: str, errno: int | None = None):
        self.path = path
        self.reason = reason
        OSError.__init__(self, f"{path}: {reason}")
        self.errno = errno
        self.parameters = ()

    def __reduce__(self):  # so it crosses a process boundary whole (a pool's worker, a job's result)
        return type(self), (self.path, self.reason, self.errno)


class MissingFile(SluiceError):
    """A file the request names (an export to import, a rig's item source) does not exist: exit 1, as a
    missing rig or repository is."""


class ReadOnlyStore(SluiceError):
    """A write to a rig whose items are an external, read-only beads export."""


class SourceFailed(SluiceError):
    """A rig's item command failed, hung or printed something that is not a beads export.

    Its last good snapshot keeps serving; the rig is shown ``source_stale``.
    """


class NotARepository(SluiceError):
    """A path given as a rig repository is not a git repository."""


class InvalidOperation(SluiceError):
    """The operation is understood but refused (cycle, closed item, guard)."""


class NotAdmitted(InvalidOperation):
    """``scheduler run --item``: admission does not let the item go now.

    ``reasons`` holds the reasons (each with ``code`` and ``detail``), the
    ones ``scheduler explain`` gives.
    """

    def __init__(self, item_id: str, reasons: list):
        self.item_id = item_id
        self.reasons = list(reasons)
        said = "; ".join(f"{r.code}: {r.detail}" if r.detail else r.code for r in self.reasons)
        super().__init__(f"{item_id} not launched: {said or 'not admitted'}")


class DispatchBusy(SluiceError):
    """Another dispatch cycle holds the dispatch lock."""


class LockBusy(SluiceError):
    """A lock stayed busy past its timeout: another sluice call is holding it.

    Raised wherever the library waits for a lock too long, so a caller needs
    to catch only :class:`SluiceError`.
    """

    def __init__(self, lock_file: str):
        self.lock_file = lock_file
        super().__init__(f"timed out waiting for {lock_file}; another sluice command is holding it")


class ExecutorError(SluiceError):
    """An executor could not launch, count or stop polecats."""


class UnknownPolecat(ExecutorError):
    """Neither a polecat id nor the item id of any polecat the executor knows."""


class SlingFailed(SluiceError):
    """Nothing was slung (the MCP tool): the message is the sling's JSON document with its errors."""


class ExecutorUnavailable(ExecutorError):
    """The executor itself is unusable (not configured, cluster unreachable).

    Unlike a launch failure this is not counted against any item.
    """


def os_error_text(err: OSError) -> str:
    """``path: reason`` for an error from the operating system, in one line (no traceback)."""
    reason = err.strerror or str(err)
    return f"{err.filename}: {reason}" if err.filename else reason


def internal_error_text(err: BaseException) -> str:
    """What every surface says of an error sluice did not expect (a bug), in one line."""
    return f"internal error: {type(err).__name__}: {err} (set SLUICE_DEBUG=1 for details)"
