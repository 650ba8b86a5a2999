"""Regexes from configs and command lines, refused before use when matching them can take exponential or high
polynomial time (pure).

Topic and group patterns are matched by backtracking engines: Python's `re` in the python engine, the monitor and
the failover commands, and `java.util.regex` in the spark engine's Kafka source (`subscribePattern`) and in
MirrorMaker. A pattern such as `(a+)+$` takes seconds per topic name of 30 characters and longer than anyone waits
for a name of 249: the process hangs inside one match, where it cannot even answer SIGTERM (Python runs its
handlers between bytecodes). Such patterns are found in the pattern's syntax tree and refused with a way out that
both engines understand: a possessive quantifier (`a++`) or an atomic group (`(?>...)`), which never backtrack.

Refused, outside possessive quantifiers and atomic groups:
- a quantifier that repeats a varying number of times over a part that holds another such quantifier (`(a+)+`,
  `(\\w*)*`) or an alternation (`(a|aa)+`): nested quantifiers, the classical exponential case. Some of these are
  harmless (`(-[a-z]+)*`, where each repetition starts with a character the inner one cannot match); they are
  refused all the same, and the possessive form (`(-[a-z]++)*`) says the same thing;
- more than three unbounded quantifiers in one pattern (`.*a.*a.*a.*`): polynomial, but of a degree that takes
  seconds per name.
"""

from __future__ import annotations

import re
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

__all__ = ["MAX_UNBOUNDED", "PatternError", "backtracking_hazard", "compile_pattern"]

MAX_UNBOUNDED = 3
_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)
_UNBOUNDED = sre_constants.MAXREPEAT
_ADVICE = "make the inner quantifier possessive (`a++`, `\\w*+`) or the group atomic (`(?>...)`)"


class PatternError(ValueError):
    """A pattern that does not compile (`hazard` False) or that matching could hang on (`hazard` True); the message
    says why."""

    def __init__(self, message: str, *, hazard: bool) -> None:
        super().__init__(message)
        self.hazard = hazard


def _walk(items: Any, inside_repeat: bool, unbounded: list[int]) -> str | None:
    """The first hazard in a parsed (sub)pattern; counts the backtracking unbounded quantifiers into `unbounded`."""
    for op, av in items:
        if op in _REPEATS:
            low, high, body = av
            if high == _UNBOUNDED:
                unbounded[0] += 1
            if high > 1 and high != low:  # a fixed count (`x{3}`) repeats one way only
                if inside_repeat:
                    return "a quantifier inside a quantified group (nested quantifiers, as in `(a+)+`)"
                found = _walk(body, True, unbounded)
            else:
                found = _walk(body, inside_repeat, unbounded)
        elif op == sre_constants.POSSESSIVE_REPEAT:
            found = _walk(av[2], False, [0])  # no backtracking into it: only its own body must be safe
        elif op == sre_constants.ATOMIC_GROUP:
            found = _walk(av, False, [0])
        elif op == sre_constants.SUBPATTERN:
            found = _walk(av[3], inside_repeat, unbounded)
        elif op == sre_constants.BRANCH:
            if inside_repeat:
                return "an alternation inside a quantified group (as in `(a|aa)+`)"
            found = next((f for branch in av[1] if (f := _walk(branch, False, unbounded))), None)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            found = _walk(av[1], False, unbounded)
        elif op == sre_constants.GROUPREF_EXISTS:
            found = next((f for part in av[1:] if part is not None and (f := _walk(part, False, unbounded))), None)
        else:
            found = None
        if found:
            return found
    return None


def backtracking_hazard(pattern: str) -> str | None:
    """What in `pattern` can make a backtracking match take exponential (or high polynomial) time; None when nothing
    can. `pattern` must compile."""
    unbounded = [0]
    found = _walk(sre_parse.parse(pattern), False, unbounded)
    if found:
        return found
    if unbounded[0] > MAX_UNBOUNDED:
        return f"{unbounded[0]} unbounded quantifiers (`*`, `+`, `{{n,}}`); at most {MAX_UNBOUNDED} can backtrack"
    return None


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """`pattern` compiled, or PatternError saying why it does not compile or why matching it could hang."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise PatternError(exc.msg, hazard=False) from None
    except RecursionError:
        raise PatternError("nested too deeply", hazard=False) from None
    try:
        hazard = backtracking_hazard(pattern)
    except RecursionError:
        raise PatternError("nested too deeply", hazard=False) from None
    if hazard:
        raise PatternError(f"matching it can take longer than anyone waits: {hazard}; {_ADVICE}", hazard=True)
    return compiled
