"""Structure figures: the import graph between floors, and the files a run walks through.

Prints (and writes as JSON) the arrows between the package's floors, any upward
arrow, the function-local imports in the core, and, for a small program, the
tempo files entered from ``Program.run`` to the first NumPy kernel the
generated program calls, with the changes of direction between floors on
that walk (down: towards ``errors``; up: towards ``api``).

    .venv/bin/python benchmarks/structure.py [--out benchmarks/results/structure.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tempo as tpo  # noqa: E402
import tempo.api.compile  # noqa: E402,F401  (imported before the walk is traced)
from tests.test_import_graph import CORE, RANK, _floor, _graph  # noqa: E402

ROOT = Path(tpo.__file__).parent


def import_figures() -> dict:
    graph = _graph()
    arrows = sorted({(_floor(m), _floor(t)) for m, t, _ in graph if _floor(m) != _floor(t)})
    return {"arrows": len(arrows),
            "upward": sorted({(m, t) for m, t, _ in graph if RANK[_floor(t)] > RANK[_floor(m)]}),
            "cycles": sorted((a, b) for a, b in arrows if (b, a) in arrows),
            "local_in_core": sorted({(m, t) for m, t, local in graph if local and _floor(m) in CORE})}


def run_walk() -> list[str]:
    """The tempo files entered from Program.run to the first NumPy kernel, in first-entry order."""
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        r = tpo.from_numpy(np.arange(5, dtype=np.float32), dims=(t,))
        program = ctx.compile([r[t:T].sum() * 2.0])
    entered: list[str] = []

    def profile(frame, event, arg):
        if event != "call" or (entered and entered[-1] == "kernel"):
            return
        path = frame.f_code.co_filename
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if caller == "<tempo program>" and (path.endswith("backends/numpy.py")
                                            or path.startswith("<numpy island")):  # a fused island's code
            entered.append("kernel")
        elif path.startswith(str(ROOT)):
            entered.append(os.path.relpath(path, ROOT))

    sys.setprofile(profile)
    try:
        program.run({"T": 5})
    finally:
        sys.setprofile(None)
    return list(dict.fromkeys([f for f in entered if f != "kernel"] + ["runtime/backends/numpy.py"]))


def changes_of_direction(files: list[str]) -> int:
    floors = [f.split("/")[0].removesuffix(".py") for f in files]
    turns: list[str] = []
    for a, b in zip(floors, floors[1:]):
        if RANK.get(a) is not None and RANK.get(b) is not None and RANK[a] != RANK[b]:
            way = "down" if RANK[b] < RANK[a] else "up"
            if not turns or turns[-1] != way:
                turns.append(way)
    return max(len(turns) - 1, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/structure.json")
    args = parser.parse_args()
    figures = import_figures()
    walk = run_walk()
    figures.update(walk=walk, walk_files=len(walk), walk_changes_of_direction=changes_of_direction(walk))
    print(f"arrows between floors: {figures['arrows']}; upward: {len(figures['upward'])}; "
          f"cycles: {len(figures['cycles'])}")
    print(f"function-local imports in the core: {len(figures['local_in_core'])}")
    for m, t in figures["local_in_core"]:
        print(f"  {m} -> {t}")
    print(f"Program.run to a NumPy kernel: {len(walk)} files, "
          f"{figures['walk_changes_of_direction']} changes of direction")
    for f in walk:
        print(f"  {f}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(figures, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
