"""Branch and directory names of per-run workspaces, decided on plain values.

A workspace (``executor.workspace = "clone"``) is a fresh clone of the rig on
a branch of its own, ``sluice/<item_id>`` by default, ``sluice/<item_id>-2``
for the second attempt and so on.  Item ids come from beads and titles from
agents, so every name made from them is checked here against git's rules for
ref names (``git check-ref-format``) and the rules for one path component,
without starting git: the config is validated on every read.
"""

from __future__ import annotations

import re

CLONE = "clone"
DEFAULT_BRANCH = "sluice/{item_id}"
BRANCH_PLACEHOLDERS = ("item_id", "rig")
_PLACEHOLDER = re.compile("{(" + "|".join(BRANCH_PLACEHOLDERS) + ")}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_component(text: str) -> str:
    """``text`` as one name git and every filesystem accept: ``[A-Za-z0-9._-]``, no ``..``, no dot or
    dash first, no ``.lock`` or dot last."""
    out = _UNSAFE.sub("_", text)
    while ".." in out:
        out = out.replace("..", "_.")
    out = out.lstrip(".-") or "_"
    if out.endswith(".lock"):
        out = out[: -len(".lock")] + "_lock"
    return out.rstrip(".") or "_"


def ref_problem(name: str) -> str | None:
    """Why ``name`` cannot be a branch (git's ref-name rules), or None when it can."""
    if not name or name.startswith(("/", "-")) or name.endswith(("/", ".")):
        return "a branch name must not be empty, start with '/' or '-', or end with '/' or '.'"
    if name == "@" or ".." in name or "@{" in name or "//" in name:
        return "a branch name must not be '@' or hold '..', '@{' or '//'"
    bad = sorted({c for c in name if c in " ~^:?*[\\\x7f" or ord(c) < 32})
    if bad:
        return f"a branch name must not hold {' '.join(repr(c) for c in bad)}"
    for part in name.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return "no part of a branch name may start with '.' or end with '.lock'"
    return None


def template_problem(template: str) -> str | None:
    """Why ``template`` cannot name workspace branches, or None: it must hold ``{item_id}`` (two items
    never share a branch) and give a valid branch for any id."""
    if "{item_id}" not in template:
        return "the branch template must hold {item_id}, so two items never share a branch"
    stray = _PLACEHOLDER.sub("", template)
    if "{" in stray or "}" in stray:
        return f"the branch template may use only {', '.join('{' + p + '}' for p in BRANCH_PLACEHOLDERS)}"
    problem = ref_problem(branch_name(template, "x-1", "rig", 2))
    return f"{template!r} does not make a valid branch: {problem}" if problem else None


def branch_name(template: str, item_id: str, rig: str, attempt: int = 1) -> str:
    """The branch of one attempt at an item: the template filled in, ``-N`` added from the second on."""
    values = {"item_id": safe_component(item_id), "rig": safe_component(rig)}
    base = _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
    return base if attempt <= 1 else f"{base}-{attempt}"


def workspace_dirname(item_id: str, attempt: int = 1) -> str:
    """The workspace directory of one attempt, under its rig's directory: ``<item_id>[-N]``."""
    base = safe_component(item_id)
    return base if attempt <= 1 else f"{base}-{attempt}"
