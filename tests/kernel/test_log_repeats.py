"""Repeated librdkafka lines are counted, not logged, and the count is said (pure: records carry their own time)."""

from __future__ import annotations

import logging

from kernel.log_repeats import Demoted, RepeatFilter


def _line(message: str, at: float, name: str = "mirrorwatch.kafka.target") -> logging.LogRecord:
    record = logging.LogRecord(name, logging.WARNING, __file__, 1, message, (), None)
    record.created = at
    return record


def _refused(broker: int, after_ms: int) -> str:
    return f"FAIL [rdkafka#producer-1] 127.0.0.1:3909{broker}/{broker}: Connect failed: refused (after {after_ms}ms)"


def test_a_flood_of_alike_lines_passes_its_first_lines_and_then_says_how_many_were_left_out() -> None:
    repeats = RepeatFilter(burst=3, window_s=60)
    flood = [_line(_refused(i % 2, i), 1000.0 + i / 1000) for i in range(150)]  # 150 lines in 0.15 s
    passed = [r for r in flood if repeats.filter(r)]
    assert len(passed) == 3
    assert "counted, not logged" in passed[-1].getMessage() and "counted" not in passed[0].getMessage()
    later = _line(_refused(1, 0), 1061.0)  # a window later, the kind again
    assert repeats.filter(later)
    assert later.getMessage().endswith("(147 more like it left out)")


def test_different_lines_and_loggers_are_counted_apart() -> None:
    repeats = RepeatFilter(burst=1, window_s=60)
    assert repeats.filter(_line("Connect failed: refused", 1.0))
    assert repeats.filter(_line("Metadata request timed out", 1.1))
    assert repeats.filter(_line("Connect failed: refused", 1.2, name="mirrorwatch.kafka.source"))
    assert not repeats.filter(_line("Connect failed: refused", 1.3))


def test_the_gapless_confwarn_and_a_getpid_retry_are_not_warnings_and_other_warnings_stay() -> None:
    """librdkafka's CONFWARN for the experimental property mirrorwatch sets on purpose is DEBUG (not shown at the
    default level), a producer-id retry INFO; any other warning, CONFWARN of another property included, stays."""
    demoted = Demoted()
    logger = logging.getLogger("mirrorwatch.kafka.demoted-test")
    logger.setLevel(logging.INFO)
    gapless = _line(
        "CONFWARN [rdkafka#producer-1] [thrd:app]: Configuration property enable.gapless.guarantee is experimental: "
        "When set to `true`, any error ...",
        1.0,
        name=logger.name,
    )
    assert not demoted.filter(gapless) and gapless.levelname == "DEBUG"
    logger.setLevel(logging.DEBUG)
    assert demoted.filter(gapless)
    retry = _line("GETPID [rdkafka#producer-1] [thrd:main]: Failed to acquire PID: Coordinator not available: retrying",
                  2.0, name=logger.name)  # fmt: skip
    assert demoted.filter(retry) and retry.levelno == logging.INFO
    other = _line(
        "CONFWARN [rdkafka#producer-1] [thrd:app]: Configuration property foo is deprecated", 3.0, name=logger.name
    )
    assert demoted.filter(other) and other.levelno == logging.WARNING
