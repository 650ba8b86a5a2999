"""The house plan of ARCHITECTURE.md, checked on every import of every file (function-level imports included).

Drawn with one room per top-level folder, every import points down a floor: no arrow back up, none sideways between
rooms of one floor, no circle (`wrong_arrows`, mutation-checked below on a copy of the tree). Inside the rooms: the
domains use the local Kafka tooling only for its jars, pure modules import no I/O library, and no file or class
grows past what a newcomer reads in one sitting."""

from __future__ import annotations

import ast
import functools
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The rooms, top floor first. A room imports only rooms on floors below its own; every top-level folder that holds
# Python code has its floor here (a new folder must be placed before it can land).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("tests",),
    ("bench", "scripts"),  # outside the product: they measure and run it
    ("mirrorwatch",),  # the composition root: the CLI, the process wiring, the demo, check/failover/migrate commands
    ("mirror", "monitor", "canary", "failover", "dashboards", "alerts"),  # the domains, side by side
    ("localkafka",),  # Apache Kafka on this machine: jars, local clusters, their security material
    ("kernel",),  # the shared kernel: config, client factory, clock, errors, the contracts the domains share
)
DOMAINS = FLOORS[3]
PRODUCT = ("mirrorwatch", *DOMAINS, "localkafka", "kernel")
# Pure cores: decisions and contracts, fed by shells; no Kafka client, Spark, Prometheus client, Streamlit.
PURE = {
    "kernel.worker_status",
    "kernel.clock",
    "kernel.histogram",
    "kernel.alert_thresholds",
    "kernel.rename",
    "kernel.provenance",
    "kernel.patterns",
    "kernel.acl",
    "kernel.link_control",
    "kernel.byte_rate",
    "kernel.progress_format",
    "kernel.sharing",
    "monitor.cardinality",
    "kernel.selection",
    "failover.copied",
    "dashboards.shards",
    "dashboards.health",
    "monitor.evaluator",
    "monitor.windows",
    "monitor.snapshot",
    "monitor.offsets_topic",
    "monitor.history",
    "monitor.own_alerts",
    "monitor.state",
    "monitor.links",
    "monitor.served",
    "monitor.dating",
    "monitor.moments",
    "mirror.drift",
    "mirror.progress",
    "mirror.highs",
    "mirror.expiry",
    "mirror.client_stats",
    "mirror.flow",
    "mirror.gaps",
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
# What a domain may take from the local Kafka tooling: the jars (the spark engine's Kafka connector). The local
# clusters and their security material are a tool of the CLI, the demo, the tests and the benchmarks.
DOMAIN_MAY_USE = {"localkafka.jars"}
# A module a newcomer can read in one sitting, a class one can hold in mind (issue #19: the engine was 1,300 lines).
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


def floor_of(room: str) -> int:
    return next(i for i, rooms in enumerate(FLOORS) if room in rooms)


# What building a package leaves in a checkout (`pip wheel .`, `python -m build`; .gitignore knows them): copies and
# metadata of the rooms, never rooms.
BUILD_OUTPUTS = ("build", "dist")


def rooms(root: Path) -> list[str]:
    """The top-level folders of `root` that hold Python code (build outputs are not rooms: issue #68)."""
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and p.name not in BUILD_OUTPUTS
        and not p.name.endswith(".egg-info")
        and any(p.rglob("*.py"))
    )


def python_files(root: Path, room: str) -> Iterator[Path]:
    yield from sorted((root / room).rglob("*.py"))


def module_name(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def imports_with_lines(path: Path) -> tuple[tuple[str, int], ...]:
    """Every absolute import of `path` (function-level ones too) and its line."""
    return _imports_in(path.read_text(), str(path))


@functools.cache  # the mutation test reads the tree a dozen times; only the mutated file's text is new
def _imports_in(source: str, filename: str) -> tuple[tuple[str, int], ...]:
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
    return tuple(found)


def imports_of(path: Path) -> set[str]:
    return {name for name, _line in imports_with_lines(path)}


def arrows(root: Path) -> dict[tuple[str, str], list[str]]:
    """The picture: (from room, to room) -> the `file:line`s of the imports drawing that arrow."""
    known = set(rooms(root))
    drawn: dict[tuple[str, str], list[str]] = {}
    for room in known:
        for path in python_files(root, room):
            for name, line in imports_with_lines(path):
                to = name.split(".", maxsplit=1)[0]
                if to in known and to != room:
                    drawn.setdefault((room, to), []).append(f"{path.relative_to(root)}:{line}")
    return drawn


def wrong_arrows(root: Path) -> list[str]:
    """Every arrow that does not point down a floor: back up, or sideways between rooms of one floor."""
    wrong = []
    for (source, to), where in sorted(arrows(root).items()):
        if floor_of(to) <= floor_of(source):
            way = "sideways" if floor_of(to) == floor_of(source) else "back up"
            wrong.append(f"{source} -> {to} ({way}): {', '.join(where[:3])}")
    return wrong


def circles(root: Path) -> list[list[str]]:
    """The circles of the picture (each once, from its first room in name order)."""
    graph: dict[str, set[str]] = {}
    for source, to in arrows(root):
        graph.setdefault(source, set()).add(to)
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for to in sorted(graph.get(path[-1], ())):
            if to == path[0]:
                found.append([*path, to])
            elif to not in path and to > path[0]:
                walk([*path, to])

    for start in sorted(graph):
        walk([start])
    return found


def test_every_folder_of_code_is_a_room_with_its_floor() -> None:
    placed = {room for floor in FLOORS for room in floor}
    assert set(rooms(ROOT)) == placed, f"folders without a floor: {sorted(set(rooms(ROOT)) - placed)}"


def test_what_building_a_package_leaves_in_a_checkout_is_not_a_room(tmp_path: Path) -> None:
    """`pip wheel .` leaves build/lib/<room>/... and <name>.egg-info/ beside the rooms (issue #68)."""
    for folder in ("mirror", "build/lib/mirror", "dist/x", "mirrorwatch.egg-info"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "a.py").write_text("")
    assert rooms(tmp_path) == ["mirror"]


def test_every_import_points_down_a_floor_and_the_picture_has_no_circle() -> None:
    assert wrong_arrows(ROOT) == []
    assert circles(ROOT) == []


def modules_importing_each_other(root: Path) -> list[tuple[str, str]]:
    """Pairs of modules of one tree where each imports the other (a `TYPE_CHECKING` import too: issue #67 found
    bench.truth_faults and bench.truth_harness so; the rooms' picture cannot see it inside one room)."""
    paths = {module_name(root, path): path for room in rooms(root) for path in python_files(root, room)}
    imported = {name: imports_of(path) & set(paths) for name, path in paths.items()}
    return sorted({(a, b) for a, names in imported.items() for b in names if a < b and a in imported[b]})


def test_no_two_modules_import_each_other(tmp_path: Path) -> None:
    assert modules_importing_each_other(ROOT) == []
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "one.py").write_text("from bench.two import x\n")
    (tmp_path / "bench" / "two.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bench.one\n"
    )
    assert modules_importing_each_other(tmp_path) == [("bench.one", "bench.two")]


def test_an_import_pointing_up_or_sideways_or_closing_a_circle_is_caught(tmp_path: Path) -> None:
    """The check is mutation-tested on a copy of the tree: each wrong import, alone, turns it red."""
    for room in rooms(ROOT):
        for path in python_files(ROOT, room):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
    assert wrong_arrows(tmp_path) == [] and circles(tmp_path) == []
    mutations = {
        "kernel/clock.py": ("import mirrorwatch.cli\n", "kernel -> mirrorwatch (back up)"),
        "localkafka/local.py": (
            "\n\ndef later():\n    from monitor import service\n",
            "localkafka -> monitor (back up)",
        ),
        "monitor/links.py": ("from mirror import engine\n", "monitor -> mirror (sideways)"),
        "mirror/engine.py": ("from bench import common\n", "mirror -> bench (back up)"),
    }
    for name, (line, expected) in mutations.items():
        path = tmp_path / name
        original = path.read_text()
        path.write_text(original + line)
        wrong = wrong_arrows(tmp_path)
        assert len(wrong) == 1 and wrong[0].startswith(expected), (name, wrong)
        if expected.startswith("kernel"):
            assert ["kernel", "mirrorwatch", "kernel"] in circles(tmp_path)
        path.write_text(original)
    assert wrong_arrows(tmp_path) == []


@pytest.mark.parametrize("room", [r for floor in FLOORS for r in floor])
def test_each_room_opens_with_its_one_idea_and_what_it_may_import(room: str) -> None:
    """A package's `__init__` (a folder of scripts: each of its modules) says what the room is for and what it may
    import, so that a newcomer opening the folder knows without the architecture test."""
    init = ROOT / room / "__init__.py"
    for path in [init] if init.exists() else list(python_files(ROOT, room)):
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert len(docstring.split()) >= 8, f"{path.relative_to(ROOT)} does not say what {room}/ is for"
        assert "Imports:" in docstring, f"{path.relative_to(ROOT)} does not say what {room}/ may import"


def modules() -> dict[str, Path]:
    """Every file of code, the tests' too (each room's, top floor first)."""
    return {module_name(ROOT, path): path for floor in FLOORS for room in floor for path in python_files(ROOT, room)}


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(f"{package}.")


ALL = modules()


@pytest.mark.parametrize("module", sorted(m for m in ALL if any(_in(m, d) for d in DOMAINS)))
def test_domains_take_only_the_jars_from_the_local_kafka_tooling(module: str) -> None:
    tooling = {i for i in imports_of(ALL[module]) if _in(i, "localkafka")}
    assert tooling <= DOMAIN_MAY_USE, f"{module} imports the local development clusters: {sorted(tooling)}"


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
