"""The house plan of ARCHITECTURE.md, checked on every import of every module (function-level imports included):
the shared kernel at the ground imports no domain package; the domain packages never import the top-floor wiring;
pure modules import no I/O library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOMAINS = ("mirror", "monitor", "canary", "dashboards", "alerts")
# The top floor: the CLI, the process runner and the demo (the composition root). Everything else in mirrorwatch/ is
# the shared kernel.
TOP_FLOOR = {"mirrorwatch.cli", "mirrorwatch.services", "mirrorwatch.demo"}
# Pure cores: decisions and contracts, fed by shells; no Kafka client, Spark, Prometheus client, Streamlit.
PURE = {
    "mirrorwatch.worker_status",
    "mirrorwatch.clock",
    "mirrorwatch.histogram",
    "mirrorwatch.rename",
    "monitor.evaluator",
    "monitor.windows",
    "monitor.snapshot",
    "monitor.state",
    "mirror.progress",
    "mirror.topics",
    "mirror.spark_plan",
    "canary.tracker",
    "alerts.rules",
}
IO_LIBRARIES = ("confluent_kafka", "pyspark", "prometheus_client", "streamlit")
# Imports between domains allowed as exceptions (none: the histogram and the rename policy moved to the kernel). A new
# one must be argued here, not slipped in.
KNOWN_DOMAIN_IMPORTS: set[tuple[str, str]] = set()


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in ("mirrorwatch", *DOMAINS):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(f"{package}.")


ALL = modules()


@pytest.mark.parametrize("module", sorted(m for m in ALL if _in(m, "mirrorwatch") and m not in TOP_FLOOR))
def test_the_kernel_imports_no_domain_and_not_the_top_floor(module: str) -> None:
    wrong = sorted(i for i in imports_of(ALL[module]) if any(_in(i, d) for d in DOMAINS) or i in TOP_FLOOR)
    assert not wrong, f"{module} (the shared kernel) imports {wrong}: imports must point down"


@pytest.mark.parametrize("module", sorted(m for m in ALL if any(_in(m, d) for d in DOMAINS)))
def test_domains_never_import_the_top_floor_nor_each_other(module: str) -> None:
    imported = imports_of(ALL[module])
    assert not sorted(imported & TOP_FLOOR), f"{module} imports the top-floor wiring"
    own = module.split(".", maxsplit=1)[0]
    others = {
        i
        for i in imported
        if any(_in(i, d) for d in DOMAINS) and not _in(i, own) and (module, i) not in KNOWN_DOMAIN_IMPORTS
    }
    assert not others, f"{module} imports another domain: {sorted(others)}"


def imported_closure(module: str) -> set[str]:
    """Everything `module` imports, and what the project's modules among those import, and so on."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for name in imports_of(ALL[todo.pop()]):
            if name not in seen:
                seen.add(name)
                if name in ALL:
                    todo.append(name)
    return seen


@pytest.mark.parametrize("module", sorted(PURE))
def test_pure_modules_import_no_io_library_not_even_through_another_module(module: str) -> None:
    wrong = sorted(i for i in imported_closure(module) if any(_in(i, lib) for lib in IO_LIBRARIES))
    assert not wrong, f"{module} is pure but imports {wrong} (directly or through the project's modules)"


def test_the_known_exceptions_still_exist() -> None:
    """An exception that is gone is taken off the list (the ratchet only turns one way)."""
    for module, imported in KNOWN_DOMAIN_IMPORTS:
        assert imported in imports_of(ALL[module]), f"{module} no longer imports {imported}: remove the exception"
