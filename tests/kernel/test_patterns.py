"""Regexes that a backtracking match could hang on are refused before use (issue #22, case 3)."""

from __future__ import annotations

import re

import pytest

from kernel.patterns import PatternError, backtracking_hazard, compile_pattern

SAFE = [
    ".*",
    r"orders\..*",
    "(prod|stage)-.*",
    "(?!internal).*",
    ".*-(eu|us)-.*-v[0-9]+",
    r"a{2,5}(b{2})*",  # a fixed count repeats one way only
    r"[a-z]++(-[a-z]++)*",  # possessive: no backtracking into the repetitions
    r"(?>[a-z]+-)*orders",  # atomic
    r"(a++)+$",
    "orders|payments|audit",
]

HAZARDS = [
    (r"(a+)+$", "nested quantifiers"),
    (r"(\w*)*", "nested quantifiers"),
    (r"((((a*)*)))", "nested quantifiers"),
    (r"(x+x+)+y", "nested quantifiers"),
    (r"(a|aa)+", "an alternation inside a quantified group"),
    (r"(?:a|a?)*b", "an alternation inside a quantified group"),
    (r"(?=(a+)+b)", "nested quantifiers"),  # inside a lookahead too
    (r"(?>(a+)+b)", "nested quantifiers"),  # an atomic group does not make its own body safe
    (r".*a.*a.*a.*x", "4 unbounded quantifiers"),
]


@pytest.mark.parametrize("pattern", SAFE)
def test_patterns_that_cannot_hang_are_compiled_as_re_compiles_them(pattern: str) -> None:
    assert backtracking_hazard(pattern) is None
    assert compile_pattern(pattern) == re.compile(pattern)


@pytest.mark.parametrize(("pattern", "why"), HAZARDS)
def test_patterns_that_can_hang_are_refused_saying_what_and_the_way_out(pattern: str, why: str) -> None:
    with pytest.raises(PatternError, match=re.escape(why)) as caught:
        compile_pattern(pattern)
    assert caught.value.hazard
    assert "possessive" in str(caught.value) and "(?>...)" in str(caught.value)


@pytest.mark.parametrize(
    ("pattern", "why"), [("(", "missing ), unterminated subpattern"), ("(" * 2000 + ")" * 2000, "nested too deeply")]
)
def test_patterns_that_do_not_compile_are_refused_as_such(pattern: str, why: str) -> None:
    with pytest.raises(PatternError, match=re.escape(why)) as caught:
        compile_pattern(pattern)
    assert not caught.value.hazard
