"""Manual pages for ``sluice`` and ``git-sluice``, generated from the command line itself.

``git sluice --help`` never reaches sluice: git turns it into ``man
git-sluice``.  So the package ships ``share/man/man1/git-sluice.1`` (and
``sluice.1``), and ``man`` finds them beside the ``bin`` directory on
``PATH``.  The pages are rendered from the typer app (every command, argument
and option with its help text), written to ``man/`` by
``scripts/gen_man.py``, and a test keeps the shipped copies equal to what this
module renders, so they cannot drift from the commands.

Rendering is deterministic: no date, no terminal width, nothing from the
environment.
"""

from __future__ import annotations

from pathlib import Path

from sluice import __version__

PAGES = {"sluice.1": "sluice", "git-sluice.1": "git sluice"}

_ENVIRONMENT = [
    ("SLUICE_TOWN", "The town directory, when --town is not given (otherwise the cwd and its parents)."),
    ("SLUICE_DEBUG", "When set, log debug messages to stderr."),
    ("SLUICE_ACTOR", "Who is named as having paused the scheduler (default: the user name)."),
]
_EXIT_STATUS = [
    ("0", "Success."),
    ("1", "A domain error: the message on stderr names the problem (file and line where there is one)."),
    ("2", "A usage error: a bad command, option or value; the message says which and how to get help."),
]


def render(prog: str = "sluice") -> str:
    """The manual page (roff) for the command line invoked as ``prog``."""
    from sluice.surfaces.cli import command as command_tree

    root = command_tree()
    page_name = prog.replace(" ", "-")
    summary = _first_line(root.help or "").rstrip(".")
    out = [
        f'.TH {page_name.upper()} 1 "" "sluice {__version__}" "sluice manual"',
        ".SH NAME",
        f"{_text(page_name)} \\- {_text(summary[:1].lower() + summary[1:])}",
        ".SH SYNOPSIS",
        f".B {_text(prog)}",
        "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".br",
        f".B {_text(prog)} \\-\\-version",
        ".SH DESCRIPTION",
        *_paragraphs(root.help or ""),
        ".PP",
        _text(
            "Installed both as sluice and as git-sluice, so git sluice runs it as a git command;"
            " git sluice --help shows this page."
        ),
        ".SH OPTIONS",
        *_options(root),
        ".SH COMMANDS",
    ]
    for path, command in _walk(root, [prog]):
        usage = " ".join([*path, *_usage(command)])
        out += [f'.SS "{_text(usage)}"', *_paragraphs(command.help or ""), *_options(command),
                *_examples(path, prog)]
    for title, terms in (("ENVIRONMENT", _ENVIRONMENT), ("EXIT STATUS", _EXIT_STATUS)):
        out.append(f".SH {title}")
        for term, text in terms:
            out += [".TP", f".B {term}", _text(text)]
    out += [".SH SEE ALSO", "\\fBgit\\fR(1); docs/cli.md in the sluice sources, for every command's JSON."]
    return "\n".join(out) + "\n"


def write_pages(directory: Path) -> list[Path]:
    """Write every page into ``directory``; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, prog in PAGES.items():
        path = directory / name
        path.write_text(render(prog), encoding="utf-8")
        written.append(path)
    return written


def _walk(command, path: list[str]):
    """(words, command) of every runnable command, depth first in name order."""
    subs = getattr(command, "commands", None)
    if not subs:
        yield path, command
        return
    for name in sorted(subs):
        if not subs[name].hidden:
            yield from _walk(subs[name], [*path, name])


def _examples(path: list[str], prog: str) -> list[str]:
    from sluice.surfaces.cli.helptext import examples

    lines = examples(" ".join(path[len(prog.split()):]))
    if not lines:
        return []
    return [".PP", "Examples:", ".RS", ".nf", *(_text(prog + line[len("sluice"):]) for line in lines),
            ".fi", ".RE"]


def _options(command) -> list[str]:
    out = []
    for param in command.params:
        if param.hidden or "--help" in param.opts:
            continue
        out += [".TP", f"\\fB{_text(_term(param))}\\fR"]
        text = " ".join(part for part in (param.help or "", _default(param)) if part)
        if text:
            out.append(_text(text))
    return out


def _usage(command) -> list[str]:
    """The words after a command's name: [OPTIONS] then its arguments, as its --help shows them."""
    options = any(not p.hidden and not _is_argument(p) and "--help" not in p.opts for p in command.params)
    return (["[OPTIONS]"] if options else []) + [_term(p) for p in command.params if _is_argument(p)]


def _is_argument(param) -> bool:
    return not param.opts[0].startswith("-")


def _term(param) -> str:
    if _is_argument(param):
        word = (param.metavar or param.name).upper() + ("..." if param.nargs == -1 else "")
        return word if param.required else f"[{word}]"
    names = ", ".join(param.opts)
    if param.secondary_opts:
        return f"{names} / {', '.join(param.secondary_opts)}"
    if param.is_flag:
        return names
    return f"{names} {param.metavar or param.name.upper()}"


def _default(param) -> str:
    if _is_argument(param) or param.is_flag or param.default in (None, "", (), []):
        return ""
    return f"[default: {param.default}]"


def _paragraphs(text: str) -> list[str]:
    out = []
    for block in text.replace("\b", "").strip().split("\n\n"):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if lines:
            out += [".PP", *(_text(line) for line in lines)]
    return out


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def _text(text: str) -> str:
    """Roff-safe text: backslashes and minus signs escaped, no line read as a request."""
    escaped = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + escaped if escaped[:1] in (".", "'") else escaped
