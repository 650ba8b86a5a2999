"""Reading a YAML file a user wrote (mirrorwatch's config, the HTTP API's web config): every way it can be unreadable
is one `ConfigError` naming the file and, where there is one, the line — never a traceback or a hang.

Pure but for reading the file: no Kafka, no clock.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kernel.errors import ConfigError, ConfigProblem

__all__ = ["MAX_DEPTH", "MAX_VALUES", "read_yaml"]

MAX_DEPTH = 32  # a real config is 6 levels deep
MAX_VALUES = 100_000  # values in the document once YAML aliases are expanded (a real config: hundreds)


def read_yaml(path: str | Path, what: str = "config file") -> object:
    """The document in the YAML file at `path` (`what` it is, for the message when it cannot be read)."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError([ConfigProblem("", f"cannot read {what}: {exc.strerror}")], source) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        problem = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} on line {line}"
        raise ConfigError([ConfigProblem("", problem)], source) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem("", f"not valid YAML: {where}{reason}")], source) from None
    except RecursionError:
        raise ConfigError([ConfigProblem("", f"not a config: nested deeper than {MAX_DEPTH} levels")], source) from None
    oversized = _oversized(doc)
    if oversized:
        raise ConfigError([ConfigProblem("", oversized)], source)
    return doc


def _oversized(doc: object) -> str | None:
    """Why a loaded document is not a config that validation can walk: nested too deeply, or too many values once
    aliases are expanded (a few hundred bytes of nested aliases expand to billions, or to a cycle); None when fine."""
    stack: list[tuple[object, int]] = [(doc, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return f"not a config: more than {MAX_VALUES:,} values once its YAML aliases are expanded"
        if depth > MAX_DEPTH:
            return f"not a config: nested deeper than {MAX_DEPTH} levels"
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for pair in node.items() for child in pair)
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return None
