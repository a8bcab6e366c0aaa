"""Dependencies between gpse_dgl's subpackages and modules point one way (docs/ARCHITECTURE.md).

Every module under ``gpse_dgl/`` is parsed with :mod:`ast` (nothing is imported); each import, at module
level or inside a function, becomes an edge between two modules, and between the *parts* of the
package: a subpackage (``gpse_dgl.encode.loading`` -> ``encode``) or a top-level module
(``gpse_dgl.cli`` -> ``cli``; the package's own ``__init__`` is ``gpse_dgl``). ``FLOORS`` lists the
parts from the bottom up; a part may import parts on lower floors only, so parts on one floor do not
import each other. Within a part no two modules import each other, directly or around a circle; the two
training pipelines (``train/pretraining``, ``train/downstream``) do not import each other, and the run
machinery they share at the top of ``train/`` imports neither. A private name (``_x``) is never imported
from another module: what several modules need is public, and private DGL / torch access is in
``gpse_dgl/_private.py``.
"""
from __future__ import annotations

import ast
import io
import tokenize
from collections import defaultdict
from pathlib import Path

PACKAGE = "gpse_dgl"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

#: The allowed order, bottom first. An import may only go down to a lower floor.
FLOORS = (
    ("_dgl_compat",),        # DGL import guard: runs before DGL is imported, imports nothing of ours
    ("_env",),               # process-wide settings (DGLBACKEND, OGB offline) applied before dgl / ogb
    ("gpse_dgl",),           # the package __init__ (imports _env; holds __version__)
    ("_private",),           # every private DGL / torch access, pinned to the releases it was checked on
    ("utils",),              # errors, I/O, devices, precision, checkpoints: shared by everything above
    # explicit encodings; graph sources and caches; C++ / Triton kernels and their dispatch; recipe fields and files
    ("pse", "data", "kernels", "recipes"),
    ("nn",),                 # layers, the GPSE encoder and heads, downstream models
    ("encode",),             # inference with a pretrained encoder
    ("train", "distributed"),  # pretraining and downstream loops; one graph on dgl.distributed
    ("commands",),           # one click command per verb
    ("cli",),                # the ``gpse-dgl`` click group
    ("__main__",),           # ``python -m gpse_dgl`` (what torchrun starts)
)
FLOOR_OF = {part: level for level, parts in enumerate(FLOORS) for part in parts}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def part_of(module: str) -> str:
    """``gpse_dgl.encode.loading`` -> ``encode``; ``gpse_dgl`` -> ``gpse_dgl``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else pieces[0]


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imported_modules(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Our modules an ``import`` / ``from ... import`` statement loads (``from . import x`` names module x)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != PACKAGE:
        return []
    submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES]
    return submodules or [target]


def import_statements():
    """``(module, path, node)`` for every ``import`` / ``from ... import`` of the package, at module level or
    inside a function."""
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield module, path, node


def site(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT.parent)}:{node.lineno}"


def import_edges() -> dict[tuple[str, str], list[str]]:
    """``(from part, to part) -> ["gpse_dgl/x/y.py:LINE", ...]`` over every import in the package."""
    edges = defaultdict(list)
    for module, path, node in import_statements():
        for target in imported_modules(node, module, path.name == "__init__.py"):
            src, dst = part_of(module), part_of(target)
            if src != dst:
                edges[(src, dst)].append(site(path, node))
    return dict(edges)


def find_cycle(edges) -> list[str] | None:
    """One cycle of the part graph as ``[a, b, ..., a]``, or None."""
    graph = defaultdict(set)
    for src, dst in edges:
        graph[src].add(dst)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def module_edges() -> dict[tuple[str, str], list[str]]:
    """``(module, imported module) -> ["gpse_dgl/x/y.py:LINE", ...]`` over every import in the package.

    ``from package import name`` is an edge to the package's ``__init__`` unless ``name`` is a submodule;
    importing ``a.b.c`` is an edge to ``a.b.c`` only (Python runs ``a.b``'s ``__init__`` first, but a
    package whose ``__init__`` imports its own submodules is no circle).
    """
    edges = defaultdict(list)
    for module, path, node in import_statements():
        for target in imported_modules(node, module, path.name == "__init__.py"):
            if target in MODULES and target != module:
                edges[(module, target)].append(site(path, node))
    return dict(edges)


def private_imports() -> list[str]:
    """``from x import _name`` of another module's private name (private modules such as ``_env`` are
    modules, not names, and may be imported)."""
    found = []
    for module, path, node in import_statements():
        if not isinstance(node, ast.ImportFrom):
            continue
        source = imported_modules(ast.ImportFrom(module=node.module, names=[], level=node.level), module,
                                  path.name == "__init__.py")
        if not source or source[0].split(".")[0] != PACKAGE or source[0] == module:
            continue
        found += [f"{site(path, node)} imports {alias.name} from {source[0]}" for alias in node.names
                  if alias.name.startswith("_") and not alias.name.startswith("__")
                  and f"{source[0]}.{alias.name}" not in MODULES]
    return found


#: The two pipelines of ``train/`` and the shared machinery at its top, as module-name prefixes.
PIPELINES = ("gpse_dgl.train.pretraining", "gpse_dgl.train.downstream")


def pipeline_of(module: str) -> str | None:
    return next((p for p in PIPELINES if module == p or module.startswith(p + ".")), None)


def test_every_part_has_a_floor():
    unplaced = sorted({part_of(m) for m in MODULES} - set(FLOOR_OF))
    assert not unplaced, f"add these parts of {PACKAGE} to FLOORS in tests/test_layering.py: {unplaced}"


def cycle_report(edges) -> str | None:
    """One import cycle of ``edges`` with where each step is written, or None."""
    cycle = find_cycle(edges)
    if cycle is None:
        return None
    return "; ".join(f"{a} -> {b} ({', '.join(edges[(a, b)][:3])})" for a, b in zip(cycle, cycle[1:]))


def test_no_import_cycle_between_parts():
    cycle = cycle_report(import_edges())
    assert cycle is None, f"import cycle between parts of gpse_dgl: {cycle}"


def test_imports_only_go_down():
    upward = [f"{src} -> {dst} ({', '.join(sites[:3])}{' ...' if len(sites) > 3 else ''})"
              for (src, dst), sites in sorted(import_edges().items())
              if src in FLOOR_OF and dst in FLOOR_OF and FLOOR_OF[dst] >= FLOOR_OF[src]]
    assert not upward, "imports against the allowed order (FLOORS):\n" + "\n".join(upward)


def test_no_import_cycle_between_modules():
    cycle = cycle_report(module_edges())
    assert cycle is None, f"import cycle between modules of gpse_dgl: {cycle}"


def test_the_training_pipelines_do_not_import_each_other():
    crossing = [f"{src} -> {dst} ({', '.join(sites[:3])})" for (src, dst), sites in sorted(module_edges().items())
                if src.startswith("gpse_dgl.train.") and pipeline_of(dst) and pipeline_of(src) != pipeline_of(dst)]
    assert not crossing, ("train/pretraining and train/downstream do not import each other, and the shared "
                          "machinery at the top of train/ imports neither:\n" + "\n".join(crossing))


def test_no_private_name_is_imported_from_another_module():
    found = private_imports()
    assert not found, "make these names public (or keep the use in their module): " + "; ".join(found)


#: The package of the compiled and Triton kernels: the rest of gpse_dgl imports its ``__init__`` (the dispatch)
#: only, never one of its modules.
KERNELS = f"{PACKAGE}.kernels"


def kernel_module_imports() -> list[str]:
    """Imports of a module of ``gpse_dgl.kernels`` (not the package's dispatch) from outside the package."""
    found = []
    for module, path, node in import_statements():
        if module == KERNELS or module.startswith(KERNELS + "."):
            continue
        found += [f"{site(path, node)} imports {target}" for target in
                  imported_modules(node, module, path.name == "__init__.py") if target.startswith(KERNELS + ".")]
    return found


def test_nothing_outside_kernels_imports_a_kernel_module():
    found = kernel_module_imports()
    assert not found, ("call kernels through gpse_dgl.kernels (its registry picks the path); a kernel module is "
                       "imported inside gpse_dgl/kernels/ only: " + "; ".join(found))


def test_kernel_sources_live_in_kernels():
    stray = sorted(p.relative_to(ROOT.parent).as_posix() for p in ROOT.rglob("*") if p.suffix in (".cpp", ".h", ".cu")
                   and ROOT / "kernels" not in p.parents)
    assert not (ROOT / "nn" / "csrc").exists() and not stray, f"C++ sources belong in gpse_dgl/kernels/csrc/: {stray}"


#: The modules that read a precision's name (a recipe key, a flag, or an argument of the library's public encoding
#: functions) and decide it, once (``utils.precision.decide_precision`` / ``as_precision``); everything below
#: them is handed the decided ``Precision``.
PRECISION_ENTRY_POINTS = ("gpse_dgl.commands", "gpse_dgl.train.pretraining.run", "gpse_dgl.train.downstream.job",
                          "gpse_dgl.encode.inference", "gpse_dgl.encode.precompute", "gpse_dgl.encode.transform",
                          "gpse_dgl.utils.precision")
#: What turns a name into a precision.
PRECISION_PARSERS = {"decide_precision", "as_precision", "select_precision", "autocast"}
PRECISION_NAMES = {"fp32", "bf16", "fp16"}


def precision_parsing() -> list[str]:
    """Below the entry points: imports of a precision parser, and comparisons with a precision's name."""
    found = []
    for module, path in MODULES.items():
        if module.startswith(PRECISION_ENTRY_POINTS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("utils.precision"):
                found += [f"{site(path, node)} imports {a.name}" for a in node.names if a.name in PRECISION_PARSERS]
            elif isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value in PRECISION_NAMES
                    or isinstance(c, (ast.Tuple, ast.List, ast.Set)) and any(
                        isinstance(e, ast.Constant) and e.value in PRECISION_NAMES for e in c.elts)
                    for c in [node.left, *node.comparators]):
                found.append(f"{site(path, node)} compares with a precision's name")
    return found


def test_no_module_below_the_entry_points_parses_a_precision():
    found = precision_parsing()
    assert not found, ("decide the precision once at the entry point (utils.precision.decide_precision) and pass "
                       "the Precision down: " + "; ".join(found))


def test_dgl_is_imported_after_the_settings():
    """Every module importing dgl at its top imports ``gpse_dgl._env`` (or ``_private``, which does) first."""
    late = []
    for module, path in MODULES.items():
        settings = dgl_line = None
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level and {a.name for a in node.names} & {"_env", "_private"}:
                settings = settings or node.lineno
            loads_dgl = (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "dgl" for a in node.names)) or (
                isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "dgl")
            if loads_dgl and dgl_line is None:
                dgl_line = node.lineno
        if dgl_line is not None and module not in ("gpse_dgl._env", "gpse_dgl._private") and (
                settings is None or settings > dgl_line):
            late.append(f"{path.relative_to(ROOT.parent)}:{dgl_line}")
    assert not late, "import gpse_dgl._env before dgl (DGLBACKEND, OGB's offline setting): " + ", ".join(late)


def test_the_checker_sees_local_and_relative_imports():
    source = "def f():\n    from ..utils.checkpoint import load_checkpoint\n"
    node = ast.parse(source).body[0].body[0]
    assert imported_modules(node, "gpse_dgl.encode.loading", False) == ["gpse_dgl.utils.checkpoint"]
    assert find_cycle({("encode", "train"), ("train", "encode")}) == ["encode", "train", "encode"]
    assert find_cycle({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == ["a", "b", "c", "a"]
    assert pipeline_of("gpse_dgl.train.downstream.schema") == "gpse_dgl.train.downstream"
    assert pipeline_of("gpse_dgl.train.runtime") is None and pipeline_of("gpse_dgl.train.pretrainingx") is None


# ----------------------------------------------------------------------------------------------
# function-local imports: only for optional or heavy dependencies, each with its reason

#: Top-level names whose function-local import needs a stated reason (ours, and the core libraries
#: every module may import at its top).
CORE_IMPORTS = {PACKAGE, "torch", "dgl", "numpy", "scipy"}
#: Files whose lazy imports keep CLI startup light (stated in ``commands/__init__.py``).
CLI_FILES = ("commands/", "cli.py")
#: Modules whose function-local imports follow one pattern stated once in a module-level comment.
UNIFORMLY_LAZY = {
    "gpse_dgl/data/registry.py": "each loader imports its module: listing names loads no dgl, rdkit or ogb",
}


def commented_lines(source: str) -> set[int]:
    """Line numbers that carry a ``#`` comment."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {tok.start[0] for tok in tokens if tok.type == tokenize.COMMENT}


def loads_core_module(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] in CORE_IMPORTS
    return any(alias.name.split(".")[0] in CORE_IMPORTS for alias in node.names)


def unexplained_local_imports(source: str) -> list[int]:
    """Lines of function-local imports of our modules or torch / dgl / numpy / scipy with no reason given.

    A reason is a comment on the import, on the line above it, or above the run of imports it ends
    (one comment serves a function's block of lazy imports).
    """
    tree = ast.parse(source)
    local = sorted({node for func in ast.walk(tree) if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for node in ast.walk(func) if isinstance(node, (ast.Import, ast.ImportFrom))},
                   key=lambda node: node.lineno)
    comments = commented_lines(source)
    explained_ends: set[int] = set()
    unexplained = []
    for node in local:
        lines = set(range(node.lineno - 1, node.end_lineno + 1))
        if lines & comments or node.lineno - 1 in explained_ends:
            explained_ends.add(node.end_lineno)
        elif loads_core_module(node):
            unexplained.append(node.lineno)
    return unexplained


def test_function_local_imports_state_their_reason():
    offenders = []
    for path in MODULES.values():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(CLI_FILES) or f"{PACKAGE}/{rel}" in UNIFORMLY_LAZY:
            continue
        lines = unexplained_local_imports(path.read_text(encoding="utf-8"))
        offenders += [f"{PACKAGE}/{rel}:{line}" for line in lines]
    assert not offenders, ("function-local imports of gpse_dgl / torch / dgl / numpy / scipy belong at module "
                           "level unless a comment says why (optional dependency, a light module kept light): "
                           + ", ".join(offenders))


def test_the_local_import_checker_wants_a_reason():
    source = ("import torch\n\n"
              "def bare():\n    import dgl\n\n"
              "def stated():\n    # scipy: kept out of the light import path\n    import scipy.linalg\n"
              "    from . import sibling\n\n"
              "def optional():\n    import pandas as pd\n")
    assert unexplained_local_imports(source) == [4]
