"""No two of our modules import each other, directly or round a loop, not even
for type checking only: a cycle means neither can be read, tested or moved
alone. (Kafka's own packages grew such knots; a small Protocol in the
importing module, or a value type in a module of its own, unties them.)

The imports are read from the source with ``ast``, so imports under
``if TYPE_CHECKING:`` and inside functions count too.
"""

from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("protocol", "config", "storage", "replication", "broker")


def _module_name(path: str, root: str) -> str:
    name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def import_graph(packages: tuple[str, ...] = PACKAGES, root: str = REPO) -> dict[str, set[str]]:
    """Each module of ``packages`` -> the modules of ``packages`` it imports."""
    raw: dict[str, list[tuple[str, list[str]]]] = {}
    for package in packages:
        for directory, _, files in os.walk(os.path.join(root, package)):
            for file in files:
                if not file.endswith(".py"):
                    continue
                path = os.path.join(directory, file)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                imported: list[tuple[str, list[str]]] = []
                for node in ast.walk(tree):
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                        imported.append((node.module, [a.name for a in node.names]))
                    elif isinstance(node, ast.Import):
                        imported.extend((a.name, []) for a in node.names)
                raw[_module_name(path, root)] = imported
    graph: dict[str, set[str]] = {}
    for module, imports in raw.items():
        deps: set[str] = set()
        for target, names in imports:
            # ``from pkg import mod`` depends on pkg.mod; ``from pkg import name``
            # on pkg itself (its __init__ defines or re-exports the name).
            submodules = {f"{target}.{n}" for n in names} & raw.keys()
            deps |= submodules
            if not names or len(submodules) < len(names):
                deps.add(target)
        graph[module] = {d for d in deps if d in raw and d != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_round_a_loop() -> None:
    graph = import_graph()
    assert len(graph) > 100, "the scan found too few modules; are the paths right?"
    knots = cycles(graph)
    assert not knots, "import cycles:\n" + "\n".join(
        " <-> ".join(c) + "\n    " + "\n    ".join(
            f"{m} -> {sorted(d for d in graph[m] if d in c)}" for m in c) for c in knots)


def test_the_check_finds_a_cycle(tmp_path) -> None:
    pkg = tmp_path / "protocol"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from protocol.b import B\n")
    (pkg / "b.py").write_text("from protocol import a\n")
    (pkg / "c.py").write_text("from protocol.a import x\n")
    assert cycles(import_graph(("protocol",), str(tmp_path))) == [["protocol.a", "protocol.b"]]
