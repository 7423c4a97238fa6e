"""The house's floors (docs/design.md "One way through"), read from the code's own imports.

- the core (``forensics`` outside ``findings`` and ``ops``) imports nothing above it;
- collectors import only the core (never another collector, findings, ops or reports);
- findings import only the core and themselves;
- reports import only the core and themselves (they render the analysis JSON);
- ops may import everything;
- no import circle between modules, no product module over 450 lines, no function over 60;
- the repository stands alone: no tracked file cites a path outside it (the test corpus
  ``../shared/real-inputs``, read in place under the ``corpus`` marker, is the one exception).
Imports inside functions count: a lazy import is still a dependency.
"""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PACKAGES = ("forensics", "collectors", "reports")
MAX_LINES = 450
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((PROJECT / pkg).rglob("*.py")):
            parts = list(p.relative_to(PROJECT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules ``name`` imports (resolved to the longest known module name)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (here[: len(here) - node.level + 1] if node.level else [])
            mod = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{mod}.{a.name}" for a in node.names] + [mod]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _floor(mod: str) -> str:
    if mod.startswith("forensics.findings"):
        return "findings"
    if mod.startswith("forensics.ops"):
        return "ops"
    return mod.split(".")[0].replace("forensics", "core")


ALLOWED = {"core": {"core"}, "collectors": {"core"}, "findings": {"core", "findings"},
           "reports": {"core", "reports"}, "ops": {"core", "collectors", "findings", "reports", "ops"}}


def _graph():
    mods = _modules()
    known = set(mods)
    return mods, {m: _imports(m, p, known) for m, p in mods.items()}


def test_each_floor_imports_only_the_floors_below_it():
    _, graph = _graph()
    bad = []
    for m, deps in sorted(graph.items()):
        for d in sorted(deps):
            if _floor(d) not in ALLOWED[_floor(m)]:
                bad.append(f"{m} imports {d}")
            elif _floor(m) == "collectors" and _floor(d) == "collectors":
                bad.append(f"{m} imports {d}")
    # a collector may import its own package's modules (collectors.journal -> collectors.journal.wording)
    bad = [b for b in bad if not _same_collector(*b.split(" imports "))]
    assert bad == []


def _same_collector(a: str, b: str) -> bool:
    if a == "collectors":  # the COLLECTORS list names every collector
        return True
    pa, pb = a.split("."), b.split(".")
    return len(pa) > 1 and len(pb) > 1 and pa[0] == pb[0] == "collectors" and pa[1] == pb[1]


def test_there_is_no_import_circle():
    _, graph = _graph()
    # every edge counts: a submodule that reaches a sibling through its package (``from . import
    # parse``) imports that package's __init__, which imports the submodule: a circle
    g = graph
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for d in sorted(g.get(m, ())):
            visit(d)
        stack.pop()

    for m in sorted(g):
        visit(m)
    assert cycles == []


def test_no_product_module_is_over_450_lines():
    mods, _ = _graph()
    big = {m: n for m, p in mods.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}


def test_no_product_function_is_over_60_lines():
    """Issue 29: a function that decides several things is split into steps named for what each decides
    (from its ``def`` line to its last line, nested functions counted in their parent)."""
    long = []
    for m, p in _modules().items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                long.append(f"{m}.{node.name}: {n} lines")
    assert long == []


def test_collectors_declare_the_contract():
    import collectors
    for mod in collectors.COLLECTORS:
        assert isinstance(getattr(mod, "NAME", None), str), mod.__name__
        assert isinstance(getattr(mod, "OPTIONS", None), (list, tuple)), mod.__name__
        assert callable(mod.acquire) and callable(mod.read), mod.__name__
        assert (mod.__doc__ or "").strip(), mod.__name__


#: a path into the folder beside the repository, other than the test corpus read in place
OUTSIDE = re.compile(r"\.\./shared/(?!real-inputs)")


def test_no_file_cites_a_path_outside_the_repository():
    """Outside facts are summarised in docs/sources.md and docs/design.md and cited there, never by a path
    beside the checkout, which a reader of the repository alone does not have."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT, capture_output=True, check=True).stdout
    hits = []
    for name in filter(None, names.decode().split("\0")):
        path = PROJECT / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{name}:{n}: {line.strip()}")
    assert not hits, "files citing a path outside the repository:\n" + "\n".join(hits)
