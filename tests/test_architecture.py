"""The house plan of ARCHITECTURE.md, checked on every import of every module (function-level imports included):
the shared kernel at the ground imports no domain package; the domain packages never import the top-floor wiring;
pure modules import no I/O library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOMAINS = ("mirror", "monitor", "canary", "dashboards", "alerts", "failover")
# The top floor: the CLI, the process runner and the demo (the composition root). Everything else in mirrorwatch/ is
# the shared kernel.
TOP_FLOOR = {
    "mirrorwatch.cli",
    "mirrorwatch.failover_cli",
    "mirrorwatch.migrate_cli",
    "mirrorwatch.services",
    "mirrorwatch.demo",
}
# Pure cores: decisions and contracts, fed by shells; no Kafka client, Spark, Prometheus client, Streamlit.
PURE = {
    "mirrorwatch.worker_status",
    "mirrorwatch.clock",
    "mirrorwatch.histogram",
    "mirrorwatch.alert_thresholds",
    "mirrorwatch.rename",
    "mirrorwatch.provenance",
    "mirrorwatch.patterns",
    "mirrorwatch.acl",
    "dashboards.shards",
    "monitor.evaluator",
    "monitor.windows",
    "monitor.snapshot",
    "monitor.offsets_topic",
    "monitor.history",
    "monitor.own_alerts",
    "monitor.state",
    "monitor.links",
    "monitor.dating",
    "mirror.progress",
    "mirror.topics",
    "mirror.spark_plan",
    "mirror.java_client",
    "canary.tracker",
    "canary.probe",
    "alerts.rules",
    "failover.translate",
    "failover.mm2_format",
    "failover.migrate_format",
}
IO_LIBRARIES = ("confluent_kafka", "pyspark", "prometheus_client", "streamlit")
# The local development clusters are a tool of the CLI, the demo, the tests and the benchmarks, not of a domain.
DEV_ONLY = {"mirrorwatch.local"}
# A module a newcomer can read in one sitting, a class one can hold in mind (issue #19: the engine was 1,300 lines).
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


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
    others = {i for i in imported if any(_in(i, d) for d in DOMAINS) and not _in(i, own)}
    assert not others, f"{module} imports another domain: {sorted(others)}"
    assert not sorted(imported & DEV_ONLY), f"{module} imports the local development clusters"


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


@pytest.mark.parametrize("module", sorted(ALL))
def test_modules_and_classes_stay_small_enough_to_read(module: str) -> None:
    source = ALL[module].read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES, f"{module} has over {MAX_MODULE_LINES} lines: split it"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            lines = node.end_lineno - node.lineno + 1
            assert lines <= MAX_CLASS_LINES, f"{module}.{node.name} has {lines} lines: split it into parts"
