"""The house's rules, read from the tree: no eosflow module reaches for another's private
name, no room (a package of eosflow's) is entered but through its face, each of
eosflow's modules goes by one alias wherever it is imported under one, nothing in the
package imports what only the project runs (``testbed/``, beside it), and
docs/design.md's file map names every file the project tracks in its code folders (and
nothing that is gone); README.md stays under 150 lines."""

from __future__ import annotations

import ast
import collections
import gc
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "eosflow"
TESTBED = ROOT / "testbed"  # what only the project's tests and benchmarks run: not shipped
MAPPED_FOLDERS = ("eosflow/", "testbed/", "benchmarks/", "scripts/", "examples/", ".ci/")


@pytest.fixture(autouse=True)
def _no_finalisers_while_parsing() -> Iterator[None]:
    """CPython 3.11.7's compiler raises "AST constructor recursion depth mismatch" when a
    finaliser (an unclosed client or an unretrieved future another test left) runs
    inside ``ast.parse``: collect first, and keep the collector off while these parse."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_module(path: Path) -> bool:
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported_from(source: Path, node: ast.ImportFrom) -> Path | None:
    """The eosflow package or module a ``from ... import`` reads, or None (not ours)."""
    if node.level == 0:
        if not (node.module or "").startswith("eosflow"):
            return None
        return ROOT.joinpath(*(node.module or "").split("."))
    base = source.parent
    for _ in range(node.level - 1):
        base = base.parent
    return base.joinpath(*(node.module.split(".") if node.module else []))


def eosflow_imports(source: Path) -> Iterator[tuple[ast.ImportFrom, Path, ast.alias]]:
    """Each name ``source`` imports from an eosflow package or module: the statement,
    where it reads from, the name."""
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom):
            where = _imported_from(source, node)
            if where is not None:
                for alias in node.names:
                    yield node, where, alias


def private_reaches(source: Path) -> list[str]:
    """``from ._x import _name`` and ``_x._name`` where ``_x`` is another eosflow module:
    importing a private *module* of the package is how it is built; a private name inside
    one is that module's own."""
    tree = ast.parse(source.read_text())
    modules: dict[str, Path] = {}
    found = []
    for node, where, alias in eosflow_imports(source):
        if _is_module(where / alias.name):
            modules[alias.asname or alias.name] = where / alias.name
        elif _private(alias.name):
            found.append(f"{node.lineno}: from {'.' * node.level}{node.module or ''} "
                         f"import {alias.name}")  # fmt: skip
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and _private(node.attr)
            and not _is_module(modules[node.value.id] / node.attr)
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    reaches = {
        str(f.relative_to(ROOT)): private_reaches(f)
        for f in sorted([*PACKAGE.rglob("*.py"), *TESTBED.rglob("*.py")])
        if private_reaches(f)
    }
    assert reaches == {}, "make the name public within the package, or move it"


def _room_of(path: Path) -> Path | None:
    """The room (a package directly under eosflow) ``path`` lies in, or None."""
    rel = path.relative_to(PACKAGE).parts
    return PACKAGE / rel[0] if len(rel) > 1 and (PACKAGE / rel[0]).is_dir() else None


def back_doors(source: Path) -> list[str]:
    """Imports in ``source`` of a private module of another room (``from .._state._store
    import Store``, ``from .._protocol import _codes``, ``import eosflow._ops._logs``):
    another room is entered through its face (its ``__init__``), which names what the
    other rooms may use."""
    mine = _room_of(source)
    targets: list[tuple[int, Path]] = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom):
            where = _imported_from(source, node)
            if where is not None:
                targets += [(node.lineno, where)]
                targets += [(node.lineno, where / a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            targets += [
                (node.lineno, ROOT.joinpath(*a.name.split(".")))
                for a in node.names
                if a.name.startswith("eosflow.")
            ]
    found = []
    for line, target in targets:
        if not _is_module(target) or not target.is_relative_to(PACKAGE):
            continue
        room = _room_of(target)
        inside = target.relative_to(room).parts if room is not None else ()
        if room is not None and room != mine and any(_private(p) for p in inside):
            found.append(f"{line}: {target.relative_to(ROOT).as_posix()}")
    return found


def test_no_room_is_entered_but_through_its_face() -> None:
    doors = {
        str(f.relative_to(ROOT)): back_doors(f)
        for f in sorted(PACKAGE.rglob("*.py"))
        if back_doors(f)
    }
    assert doors == {}, "name it in the room's __init__ and import it from there"


def test_each_eosflow_module_goes_by_one_alias() -> None:
    aliases: dict[str, set[str]] = collections.defaultdict(set)
    for f in [*PACKAGE.rglob("*.py"), *TESTBED.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        for _node, where, alias in eosflow_imports(f):
            if alias.asname and _is_module(where / alias.name):
                aliases[(where / alias.name).relative_to(ROOT).as_posix()].add(alias.asname)
    assert {m: sorted(a) for m, a in aliases.items() if len(a) > 1} == {}


def reaches_for_testbed(source: Path) -> list[str]:
    """Where ``source`` imports ``testbed`` -- ``import testbed...``, ``from testbed...
    import``, or ``importlib.import_module("testbed...")`` -- at any depth (inside a
    function, under ``TYPE_CHECKING``)."""
    found = []
    for node in ast.walk(ast.parse(source.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        found += [f"{node.lineno}: {n}" for n in names if n.split(".")[0] == TESTBED.name]
    return found


def test_the_package_never_imports_the_testbed() -> None:
    """The wheel holds ``eosflow/`` alone (issue 52): a module of it importing
    ``testbed`` would fail on every user's machine. The secured broker plugs into
    ``GenuineKafka``'s ``prepare`` seam from outside instead."""
    reaches = {
        str(f.relative_to(ROOT)): reaches_for_testbed(f)
        for f in sorted(PACKAGE.rglob("*.py"))
        if reaches_for_testbed(f)
    }
    assert reaches == {}
    assert not list(PACKAGE.glob("testing/_project/*.py"))  # it moved to testbed/
    # the checker itself sees an import where there is one
    assert reaches_for_testbed(ROOT / "tests" / "runtime" / "test_stop.py")


def test_the_testbed_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in TESTBED.rglob("*.py")}
    assert sizes and max(sizes.values()) < 600, sizes


def file_map() -> set[str]:
    """The paths docs/design.md's file map names: the first of a row whole, the others
    of the row relative to its folder (``eosflow/_cli.py``, ``__main__.py``)."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## File map", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        base = ""
        for name in re.findall(r"`([^`]+)`", line.split(" | ")[0]):
            if "/" in name:
                named.add(name.rstrip("/"))
                base = name.rstrip("/") if name.endswith("/") else str(Path(name).parent)
            elif base:
                named.add(f"{base}/{name}")
            else:
                named.add(name)  # a file at the top (pyproject.toml)
    return named


def test_the_design_file_map_names_every_tracked_file_and_only_those() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    files = {t for t in tracked if t.startswith(MAPPED_FOLDERS) and (ROOT / t).is_file()}
    files -= {t for t in files if t.startswith("benchmarks/reference/")}  # measured data
    named = file_map()

    def covered(path: str) -> bool:
        return path in named or any(path.startswith(n + "/") for n in named)

    assert sorted(f for f in files if not covered(f)) == []
    assert sorted(n for n in named if not (ROOT / n).exists()) == []


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """eosflow's modules and the eosflow modules each imports, ``TYPE_CHECKING`` imports
    and imports inside functions included (a name imported from a package counts as the
    package, a module imported from it as that module)."""
    graph: dict[str, set[str]] = {}
    for f in PACKAGE.rglob("*.py"):
        edges = graph.setdefault(_module_of(f), set())
        for _node, where, alias in eosflow_imports(f):
            target = where / alias.name if _is_module(where / alias.name) else where
            edges.add(".".join(target.relative_to(ROOT).parts))
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name.startswith("eosflow."))
        edges.discard(_module_of(f))
    return graph


def test_no_import_circle_and_at_most_twelve_modules_at_the_root() -> None:
    graph = import_graph()
    # Tarjan's strongly connected components: a component of two or more is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 12, root


def test_the_readme_stays_under_150_lines() -> None:
    """README.md is the front door: what eosflow is, the two commands, a first processor,
    pointers to the rest. Detail belongs in docs/ (issue 52: it had grown to 175)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 150, f"README.md has {len(lines)} lines: move detail to docs/"


def test_one_partition_type_defined_once() -> None:
    """``Partition`` ((topic, partition)) is defined in ``_records`` alone and imported
    everywhere else (issue 52: it was defined 15 times)."""
    defined = sorted(
        str(f.relative_to(ROOT))
        for f in PACKAGE.rglob("*.py")
        for node in ast.parse(f.read_text()).body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == "Partition"
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    )
    assert defined == ["eosflow/_records.py"]
