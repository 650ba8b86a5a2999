"""The config document as read, before the model sees it (pure): where a value is (`Loc`, said as
`links[0].source`), `${VAR}` references expanded from the environment, and the cross-field checks that are reported
together with every schema problem (`kernel.config.parse_config`)."""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["Loc", "check_references", "expand_env", "format_loc", "loc_sort_key"]

Loc = tuple[str | int, ...]


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def loc_sort_key(loc: Loc) -> tuple[tuple[int, int, str], ...]:
    return tuple((1, part, "") if isinstance(part, int) else (0, 0, part) for part in loc)


ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: object, env: Mapping[str, str], loc: Loc, problems: list[tuple[Loc, str]]) -> object:
    """Replace `${VAR}` and `${VAR:-default}` in every string below `value`; `$$` is a literal `$`."""
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append((loc, f"environment variable {name!r} is not set"))
            return ""

        return ENV_REF.sub(substitute, value)
    if isinstance(value, dict):
        return {k: expand_env(v, env, (*loc, str(k)), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env, (*loc, i), problems) for i, v in enumerate(value)]
    return value


def check_references(doc: object) -> list[tuple[Loc, str]]:
    """Cross-field checks run on the raw document, so they are reported together with every schema problem."""
    problems: list[tuple[Loc, str]] = []
    if not isinstance(doc, dict):
        return problems
    clusters = doc.get("clusters")
    links = doc.get("links")
    aliases = set(clusters) if isinstance(clusters, dict) else None
    if not isinstance(links, list):
        return problems
    monitor = doc.get("monitor")
    shard = monitor.get("shard") if isinstance(monitor, dict) else None
    sharded = shard.get("clusters") if isinstance(shard, dict) else None
    for i, alias in enumerate(sharded if isinstance(sharded, list) else []):
        if aliases is not None and isinstance(alias, str) and alias not in aliases:
            known = ", ".join(sorted(aliases)) or "none"
            problems.append((("monitor", "shard", "clusters", i), f"unknown cluster {alias!r} (clusters: {known})"))
    names: dict[str, int] = {}
    for i, link in enumerate(links):
        if not isinstance(link, dict):
            continue
        for side in ("source", "target"):
            alias = link.get(side)
            if aliases is not None and isinstance(alias, str) and alias not in aliases:
                known = ", ".join(sorted(aliases)) or "none"
                problems.append((("links", i, side), f"unknown cluster {alias!r} (clusters: {known})"))
        name = link.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append((("links", i, "name"), f"duplicate link name {name!r} (also links[{names[name]}])"))
            else:
                names[name] = i
    return problems
