"""The package's floors import downward only (DESIGN.md): every import of every module under
``tempo/``, module-level and function-local, read with ``ast`` and mapped to its sub-package's floor."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tempo"

# Floors from the bottom. ``files`` (atomic writes) and ``config`` (the compiler's settings) sit
# with ``errors``; the package's own ``__init__``/``__main__`` sit above everything, since they
# gather the public API and register the applications' plug-ins.
FLOORS = ("errors", "symbolic", "ir", "schedule", "plan", "runtime", "transforms", "api",
          "nn", "optim", "rl", "llm", "superopt", "memplan", "gmi", "cli")
RANK = {**{name: k for k, name in enumerate(FLOORS)}, "files": 0.5, "config": 0.5,
        "__init__": len(FLOORS), "__main__": len(FLOORS)}
CORE = ("symbolic", "ir", "api", "transforms", "schedule", "plan", "runtime")

# The applications may use the public facade (``import tempo as tpo``): its names come from the
# floors below them, and ``tempo.llm``, the one application it binds, is bound last.
FACADE_USERS = ("nn", "optim", "rl", "llm", "superopt", "memplan", "gmi", "cli")

# Every function-local import of a tempo module in the core, with why it is local.
LOCAL_IN_CORE: dict[tuple[str, str], str] = {
    ("tempo.symbolic.expr", "tempo.symbolic.simplify"):
        "Expr's operators simplify what they build, and simplification builds Exprs",
    ("tempo.api.context", "tempo.api.compile"):
        "Context.run compiles, and the compiler reads the recurrent tensors built in a Context",
    ("tempo.api.rt", "tempo.api.functional"):
        "RecurrentTensor's methods are spelled with the functional API, which builds RecurrentTensors",
    ("tempo.api.functional", "tempo.api.autodiff"):
        "tpo.grad and backward differentiate with autodiff, whose rules build with the functional API",
    ("tempo.runtime.backends.jax", "tempo.runtime.backends"):
        "the JAX backend compiles whole loops with jax_loops, which traces the backend's own islands",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, module: str):
    """``(imported module, is function-local)`` for every import of a tempo module in ``path``,
    the source of ``module``."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    tree = ast.parse(path.read_text())

    def visit(node, local: bool):
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                yield from ((a.name, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = ".".join(package[:len(package) - child.level + 1]) if child.level else ""
                target = ".".join(x for x in (base, child.module) if x)
                if child.module is None or target == "tempo":  # ``from . import ast``: the names are modules
                    yield from ((f"{target}.{a.name}", inner) for a in child.names)
                else:
                    yield target, inner
            yield from visit(child, inner)

    return [(target, local) for target, local in visit(tree, False) if target.split(".")[0] == "tempo"]


def _graph():
    """``(module, imported module, is function-local)`` for every import of a tempo module in the
    package but an application's of the public facade."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for target, local in _imports(path, module):
            facade = target in ("tempo", "tempo.__version__") and _floor(module) in FACADE_USERS
            if not facade:
                out.append((module, target, local))
    return out


def test_every_floor_is_known():
    unknown = {_floor(m) for m, t, _ in _graph()} | {_floor(t) for _, t, _ in _graph()}
    assert unknown <= set(RANK), sorted(unknown - set(RANK))


def test_no_floor_imports_a_floor_above_it():
    upward = {(m, t) for m, t, _ in _graph() if RANK[_floor(t)] > RANK[_floor(m)]}
    assert not upward, sorted(upward)


def test_no_cycle_between_floors():
    arrows = {(_floor(m), _floor(t)) for m, t, _ in _graph() if _floor(m) != _floor(t)}
    assert all(RANK[a] != RANK[b] for a, b in arrows)
    cycles = {(a, b) for a, b in arrows if (b, a) in arrows}
    assert not cycles, sorted(cycles)


def test_function_local_imports_in_the_core_are_few_and_explained():
    local = {(m, t) for m, t, is_local in _graph() if is_local and _floor(m) in CORE}
    assert local == set(LOCAL_IN_CORE), sorted(local ^ set(LOCAL_IN_CORE))
    assert len(LOCAL_IN_CORE) <= 5


def test_the_graph_sees_local_relative_and_package_imports(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("import numpy\nfrom . import ast\nfrom tempo import nn\n"
                      "def f():\n    from tempo.api.sinks import sink\n"
                      "class C:\n    def g(self):\n        import tempo.rl.env\n")
    assert _imports(source, "tempo.schedule.probe") == [
        ("tempo.schedule.ast", False), ("tempo.nn", False), ("tempo.api.sinks", True), ("tempo.rl.env", True)]


def test_import_tempo_leaves_out_what_only_some_programs_use():
    """``import tempo`` imports neither tempo.llm, gymnasium nor safetensors (each a MiB or more
    of a process's memory); ``tpo.llm`` and a checkpoint import theirs when used."""
    probe = ("import sys, tempo as tpo\n"
             "held = [m for m in ('tempo.llm', 'gymnasium', 'safetensors') if m in sys.modules]\n"
             "assert not held, held\n"
             "assert tpo.llm.Llama.__module__ == 'tempo.llm.model' and 'tempo.llm' in sys.modules\n")
    env = dict(os.environ, PYTHONPATH=str(PACKAGE.parent))
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
