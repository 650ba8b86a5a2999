"""One root exception; subclasses carry the data a caller needs to report or retry.

Exit codes follow the CLI contract: 1 for a runtime failure, 2 for bad usage or config.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ConfigError",
    "ConfigProblem",
    "KafkaClientError",
    "LocalClusterError",
    "MirrorwatchError",
    "SetupError",
]


class MirrorwatchError(Exception):
    """Root of every error mirrorwatch raises on purpose."""

    exit_code = 1


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a config file: where (`links[0].topics.include[1]`) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(MirrorwatchError):
    """A config file (or a command line standing in for one) is invalid. Carries every problem found."""

    exit_code = 2

    def __init__(self, problems: list[ConfigProblem], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        super().__init__(f"{len(problems)} problem(s){where}: " + "; ".join(str(p) for p in problems))


class SetupError(MirrorwatchError):
    """A tool mirrorwatch needs on this machine (java, mvn) is missing or broken. The message says what to install."""


def require_extra(module: str, extra: str, what: str) -> None:
    """Raise SetupError naming the pip extra when `module` (of an optional part: pyspark, streamlit) is not
    installed: the package installs without them, so that a container of the mirror needs neither."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise SetupError(f"{what} needs {module}, which is not installed: pip install 'mirrorwatch[{extra}]'")


class LocalClusterError(MirrorwatchError):
    """The local development clusters could not be started, reached or stopped."""


class KafkaClientError(MirrorwatchError):
    """A Kafka operation failed; keeps librdkafka's error code name and whether a retry can help."""

    def __init__(self, message: str, *, code: str = "", retriable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable
