"""What ``--help`` says beyond the commands' own text: readable placeholders and examples.

typer names a value by its Python type (``<str>``, ``<list[str]>``, ``<bool>``
for a flag) and a required argument in braces (``{targets}...``).  People read
``--var KEY=VALUE`` and ``ITEM...`` better, so :func:`readable` gives every
parameter of the built command tree a placeholder (:data:`METAVARS`, else the
parameter's name in capitals, nothing for a flag) and every command its
examples (:data:`EXAMPLES`) as an epilog.  The manual pages are rendered from
the same tree, so they say the same.  ``config set --help`` lists the config
keys with what each accepts and its default; that list needs the config model
(pydantic), so it is put together only when that help is shown.
"""

from __future__ import annotations

#: Placeholders by parameter name, where the name in capitals would say less.
METAVARS = {
    "targets": "ITEM... [RIG]",
    "var": "KEY=VALUE",
    "dep": "[TYPE:]ID",
    "interval": "SECONDS",
    "timeout": "SECONDS",
    "until": "TIME|DURATION",
    "work_seconds": "N|LOW-HIGH",
    "item_id": "ID",
    "ref": "ITEM|ID",
    "priority": "0-4",
    "touches": "GLOB",
    "add_label": "LABEL",
    "issue_type": "TYPE",
    "dep_type": "TYPE",
    "source": "A",
    "target": "B",
    "rig": "RIG",
    "name": "NAME",
    "repo": "REPO",
    "items_command": "ARGV",
    "token_file": "FILE",
    "allow_host": "HOST",
    "town": "PATH",
    "since": "DURATION",
}

#: A few typical command lines per command (without the leading ``sluice``), shown under its help.
EXAMPLES: dict[str, list[str]] = {
    "compact": ["compact", "compact --rig api --json"],
    "export": ["export api", "export api --open", "export --runs"],
    "config get": ["config get scheduler.max_polecats"],
    "config set": ["config set scheduler.max_polecats 3",
                   "config set executor.command '[\"my-agent\", \"--item\", \"{item_id}\"]'"],
    "daemon": ["daemon", "daemon --once", "daemon --interval 60 --timeout 120"],
    "demo": ["demo", "demo --web --port 0", "demo --work-seconds 1-3 --keep"],
    "feed": ["feed", "feed --follow --rig api", "feed --kind PolecatExited --since 2h"],
    "hooks install": ["hooks install api"],
    "hooks report": ["hooks report --rig api", "hooks report --repo . --hook pre-push --json"],
    "hooks uninstall": ["hooks uninstall api"],
    "init": ["init town", "init . --json"],
    "item blocked": ["item blocked", "item blocked api --json"],
    "item close": ["item close doc-r6ck --reason done"],
    "item create": ["item create docs --title 'Document the rate limits' --priority 1",
                    "item create docs --title 'Publish the guide' --dep doc-r6ck --tokens 4000"],
    "item dep add": ["item dep add doc-fs06 doc-r6ck", "item dep add doc-fs06 doc-r6ck --type related"],
    "item import": ["item import docs export.jsonl"],
    "item list": ["item list", "item list docs --status open --label backend"],
    "item ready": ["item ready", "item ready api --limit 5 --json"],
    "item show": ["item show api-1", "item show api-1 --json"],
    "item update": ["item update doc-r6ck --status in_progress --assignee ann",
                    "item update doc-r6ck --priority 0 --add-label urgent"],
    "mcp": ["mcp", "--town /srv/town mcp"],
    "patrol": ["patrol api", "patrol api --fix --json"],
    "polecat list": ["polecat list", "polecat list --json"],
    "polecat logs": ["polecat logs api-3", "polecat logs pc-u3y2 --follow"],
    "polecat stop": ["polecat stop api-3", "polecat stop pc-u3y2 --json"],
    "polecat usage": ["polecat usage pc-u3y2 --tokens 5200"],
    "rig add": ["rig add api repos/api", "rig add docs repos/docs --prefix doc",
                "rig add web repos/web --items exports/web.jsonl"],
    "rig list": ["rig list", "rig list --json"],
    "rig refresh": ["rig refresh api"],
    "rig remove": ["rig remove docs", "rig remove api --force"],
    "schedule next": ["schedule next", "schedule next --limit 3 --preview"],
    "schedule policy set": ["schedule policy set --fairness 0.5", "schedule policy set --aging 0.25",
                            "schedule policy set --graph-id api-4 --priority 2"],
    "schedule policy show": ["schedule policy show", "schedule policy show --json"],
    "schedule policy unset": ["schedule policy unset --graph-id api-4"],
    "schedule status": ["schedule status", "schedule status --recent 10"],
    "runs": ["runs", "runs --item api-3", "runs --outcome failed --since 1h --json"],
    "scheduler broken": ["scheduler broken"],
    "scheduler clear": ["scheduler clear", "scheduler clear --item api-2"],
    "scheduler explain": ["scheduler explain api-2", "scheduler explain api-2 --json"],
    "scheduler forecast": ["scheduler forecast", "scheduler forecast --limit 10 --json"],
    "scheduler list": ["scheduler list", "scheduler list --limit 20 --json"],
    "scheduler pause": ["scheduler pause"],
    "scheduler promote": ["scheduler promote api-6", "scheduler promote api-6 --undo"],
    "scheduler reset": ["scheduler reset api-2"],
    "scheduler resume": ["scheduler resume"],
    "scheduler run": ["scheduler run --dry-run", "scheduler run --batch 2"],
    "scheduler status": ["scheduler status", "scheduler status --json"],
    "scheduler throttle": ["scheduler throttle --rig api --until 10m --reason '429 from the provider'",
                           "scheduler throttle --rig api --clear"],
    "sling": ["sling api-3 api-1", "sling api-4", "sling doc-r6ck docs --dry-run", "sling --ready api",
              "sling --all --dry-run"],
    "retry": ["retry api-3", "retry --failed --since 1d --dry-run"],
    "snapshot": ["snapshot --json"],
    "top": ["top", "top --once --rig api"],
    "web": ["web", "web --port 9000 --token-file ~/.sluice-token"],
}


def examples(path: str) -> list[str]:
    """``sluice …`` lines for the command ``path`` (``"scheduler run"``)."""
    return [f"sluice {line}" for line in EXAMPLES.get(path, [])]


def config_keys_text() -> str:
    """Every config key with what it accepts and its default (imports the config model)."""
    from sluice.core.models import CONFIG_KEYS, TownConfig

    defaults = TownConfig().model_dump()
    lines = ["Keys (what each accepts; its default):", ""]
    for key, accepts in CONFIG_KEYS.items():
        value = defaults
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        default = "none" if value is None or "NAME" in key or "LABEL" in key else _shown(value)
        lines.append(f"{key}: {accepts}; default {default}")
    return "\n".join(lines)


def _shown(value) -> str:
    import json

    return json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)


def _flag_free(param) -> None:
    param.display_type_rich = lambda ctx: None


def _argument_usage(param, word: str):
    def usage() -> str:
        return word if param.required else f"[{word}]"
    return usage


def readable(command, path: tuple[str, ...] = ()) -> None:
    """Give the command tree under ``command`` readable placeholders and examples (in place)."""
    subs = getattr(command, "commands", None)
    if subs:
        for name, sub in subs.items():
            readable(sub, (*path, name))
    for param in command.params:
        if not param.opts[0].startswith("-"):  # an argument
            word = METAVARS.get(param.name, param.name.upper())
            if param.nargs == -1 and not word.endswith("..."):
                word += "..." if param.name not in METAVARS else ""
            param.metavar = word
            param._usage_display_name = _argument_usage(param, word)
            _flag_free(param)
        elif getattr(param, "is_flag", False):
            _flag_free(param)
        else:
            param.metavar = METAVARS.get(param.name) or _by_type(param)
    _help_option_without_type(command)
    if not subs and path:
        lines = examples(" ".join(path))
        if lines:
            command.epilog = _literal("Examples:\n\n" + "\n".join(lines))
        if path == ("config", "set"):
            _with_config_keys(command)


def _literal(text: str) -> str:
    """Text rich's help renderer shows as written: ``[`` is not the start of markup there."""
    return text.replace("[", "\\[")


def _help_option_without_type(command) -> None:
    made = command.get_help_option

    def get_help_option(ctx):
        option = made(ctx)
        if option is not None:
            _flag_free(option)
        return option

    command.get_help_option = get_help_option


def _by_type(param) -> str:
    bare = param.bare_type() if hasattr(param, "bare_type") else ""
    words = {"int": "N", "list[int]": "N", "float": "NUMBER", "list[float]": "NUMBER"}
    return words.get(bare, param.name.upper())


def _with_config_keys(command) -> None:
    """``config set --help`` ends with the keys; built only when shown (it needs pydantic)."""
    shown, base = command.format_help, command.epilog or ""

    def format_help(ctx, formatter):
        command.epilog = base + "\n\n" + _literal(config_keys_text())
        return shown(ctx, formatter)

    command.format_help = format_help
