"""SHA-256 without loading OpenSSL.

``hashlib`` binds OpenSSL's library on import, about 5 ms: a fifth of what
a bare interpreter takes to start.  Every hot command hashes a little (the
config text it keys its cache by, the worktree listing its warmth is read
from), and the interpreter's own SHA-256 module gives the same digests at
no such cost.  It is a private module whose name changed in 3.12, so the
public one stays the fallback.
"""

from __future__ import annotations

try:
    from _sha2 import sha256  # Python 3.12 and later
except ImportError:  # pragma: no cover - depends on the interpreter
    try:
        from _sha256 import sha256  # Python 3.11
    except ImportError:
        from hashlib import sha256

__all__ = ["sha256"]
