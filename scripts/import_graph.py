#!/usr/bin/env python3
"""Which modules of ``src/cardinal`` import which, and the cycles among them.

    python scripts/import_graph.py            # cycles, their edges, function-local import count
    python scripts/import_graph.py --local    # also list every function-local import

Reads the source with ``ast`` only (nothing of cardinal is imported). An edge is one import of a
cardinal module: ``import cardinal.x``, ``from cardinal.x import y`` (to ``cardinal.x.y`` when ``y``
is a module, else to ``cardinal.x``) and relative imports. Each edge says whether it runs at import
time (module level, class bodies and ``try``/``if`` blocks included) or inside a function (a
function-local import, often one that hides a cycle), and whether it sits under
``if TYPE_CHECKING:``. Cycles are the strongly connected components of more than one module over
all edges, function-local ones included: a cycle hidden in a function is still a cycle. The
implicit import of a package's ``__init__`` by the import of its submodule is not an edge.
"""

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "cardinal"


@dataclass(frozen=True)
class Edge:
    source: str      # importing module, e.g. "cardinal.cli"
    target: str      # imported module, e.g. "cardinal.jobs.launch"
    path: str        # file of the import, relative to the repository root
    line: int
    local: bool      # inside a function body
    typing: bool     # under ``if TYPE_CHECKING:``

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def module_files(src: Path = SRC, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package is its ``__init__.py``)."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` starts with (``cardinal.x.y.attr`` -> ``cardinal.x.y``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
           (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module):
    """(node, local, typing) for every import statement of ``tree``."""
    stack = [(tree, False, False)]
    while stack:
        node, local, typing = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, local, typing
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                stack.append((child, True, typing))
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for body_node in child.body:
                    stack.append((ast.Module(body=[body_node], type_ignores=[]), local, True))
                for else_node in child.orelse:
                    stack.append((ast.Module(body=[else_node], type_ignores=[]), local, typing))
            else:
                stack.append((child, local, typing))


def module_edges(name: str, path: Path, modules: dict[str, Path], root: Path = ROOT) -> list[Edge]:
    """The imports of cardinal modules in one module, in line order."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    rel = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    edges = []
    for node, local, typing in _imports(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [_resolve(alias.name, modules) for alias in node.names]
        else:
            if node.level:  # relative: from the importing module's package, up level - 1
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                targets.append(sub if sub in modules else _resolve(origin, modules))
        for target in dict.fromkeys(targets):  # one edge per module a statement imports
            if target is not None and target != name:
                edges.append(Edge(name, target, rel, node.lineno, local, typing))
    return sorted(edges, key=lambda e: (e.line, e.target))


def import_graph(src: Path = SRC, package: str = PACKAGE, root: Path = ROOT) -> dict[str, list[Edge]]:
    """Every module of the package with the edges out of it."""
    modules = module_files(src, package)
    return {name: module_edges(name, path, modules, root) for name, path in modules.items()}


def part(module: str) -> str:
    """The top-level part a module belongs to: ``cardinal.ps.transport.wire`` -> ``cardinal.ps``;
    a module directly under ``cardinal/`` (``cardinal.cli``) is a part of its own."""
    return ".".join(module.split(".")[:2])


def successors(graph: dict[str, list[Edge]], key=lambda module: module) -> dict[str, set[str]]:
    """The graph over ``key(module)`` (modules, or with ``key=part`` the top-level parts), self-edges left out."""
    out = {}
    for name, edges in graph.items():
        out.setdefault(key(name), set()).update(key(e.target) for e in edges if key(e.target) != key(name))
    return out


def strongly_connected(adjacency: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, in sorted order."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for start in sorted(adjacency):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(adjacency[start])))]
        while work:
            node, todo = work[-1]
            for succ in todo:
                if succ not in adjacency:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(adjacency[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:  # every successor seen: node is done
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    out.append(sorted(component))
    return sorted(out)


def cycles(graph: dict[str, list[Edge]], key=lambda module: module) -> list[list[str]]:
    """The strongly connected components of more than one node (modules, or parts with ``key=part``)."""
    return [c for c in strongly_connected(successors(graph, key)) if len(c) > 1]


def cycle_edges(graph: dict[str, list[Edge]], cycle: list[str], key=lambda module: module) -> list[Edge]:
    """The module imports that make one cycle: from a member to another member."""
    members = set(cycle)
    return [e for name, edges in sorted(graph.items()) for e in edges
            if key(name) in members and key(e.target) in members and key(name) != key(e.target)]


def local_imports(graph: dict[str, list[Edge]], exclude: tuple[str, ...] = ("cardinal.cli",)) -> list[tuple[str, int]]:
    """Function-local import statements of cardinal modules as (file, line), outside ``exclude``."""
    return sorted({(e.path, e.line) for name, edges in graph.items() if name not in exclude
                   for e in edges if e.local})


def _cycle_lines(graph, found, key) -> list[str]:
    lines = []
    for i, cycle in enumerate(found, 1):
        lines.append(f"  cycle {i}: {' <-> '.join(cycle)}")
        for e in cycle_edges(graph, cycle, key):
            tags = "".join([" [local]" if e.local else "", " [TYPE_CHECKING]" if e.typing else ""])
            lines.append(f"    {e.source} -> {e.target}  {e.where()}{tags}")
    return lines


def report(graph: dict[str, list[Edge]], list_local: bool = False) -> str:
    edges = [e for es in graph.values() for e in es]
    lines = [f"{len(graph)} modules, {len(edges)} imports of cardinal modules "
             f"({sum(e.local for e in edges)} function-local, {sum(e.typing for e in edges)} under TYPE_CHECKING)"]
    found = cycles(graph)
    lines.append(f"module cycles (strongly connected components of more than one module): {len(found)}")
    lines += _cycle_lines(graph, found, lambda module: module)
    found = cycles(graph, part)
    lines.append(f"part cycles (modules grouped by top-level folder, cardinal.ps = ps/**): {len(found)}")
    lines += _cycle_lines(graph, found, part)
    local = local_imports(graph)
    lines.append(f"function-local imports of cardinal modules outside cli.py: {len(local)} statements")
    if list_local:
        targets = {}
        for e in edges:
            if e.local:
                targets.setdefault((e.path, e.line), []).append(e.target)
        lines += [f"  {path}:{line}  {', '.join(targets[(path, line)])}" for path, line in local]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", action="store_true", help="list every function-local import outside cli.py")
    args = parser.parse_args(argv)
    print(report(import_graph(), args.local))
    return 0


if __name__ == "__main__":
    sys.exit(main())
