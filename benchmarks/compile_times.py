"""Compile and run times of every program in the differential test suite.

Runs ``tests/api/test_differential.py`` under pytest with a small plugin that
times each compile stage (domain analysis, isl scheduling, AST build) and the
run of every program, then prints the ten largest programs (by SDG nodes) and
writes all rows as JSON.

    .venv/bin/python benchmarks/compile_times.py [--out benchmarks/results/compile_times.json]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass

import pytest

from tempo.api import compile as compile_mod


@dataclass
class Row:
    test: str
    nodes: int
    edges: int
    analyse_s: float
    schedule_s: float
    ast_s: float
    compile_s: float
    run_s: float


class Recorder:
    """A pytest plugin that wraps compile_program and Program.run."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.test = ""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        self.test = item.nodeid.split("::", 1)[1]
        original_compile, original_run = compile_mod.compile_program, compile_mod.Program.run
        pending: dict[int, float] = {}

        def timed_compile(*args, **kwargs):
            start = time.perf_counter()
            program = original_compile(*args, **kwargs)
            pending[id(program)] = time.perf_counter() - start
            return program

        def timed_run(program, bounds, **options):
            out = original_run(program, bounds, **options)
            t = program.timings
            self.rows.append(Row(self.test, len(program.sdg.nodes), len(program.sdg.edges), t["analyse"],
                                 t["schedule"], t["ast"], pending.get(id(program), float("nan")), t["run"]))
            return out

        compile_mod.compile_program, compile_mod.Program.run = timed_compile, timed_run
        try:
            yield
        finally:
            compile_mod.compile_program, compile_mod.Program.run = original_compile, original_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/compile_times.json")
    args = parser.parse_args()
    recorder = Recorder()
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "tests/api/test_differential.py"],
                       plugins=[recorder])
    if code != 0:
        raise SystemExit(f"the differential suite failed (pytest exit {code})")
    rows = sorted(recorder.rows, key=lambda r: (r.nodes, r.edges, r.run_s), reverse=True)
    print(f"\n{'program':58} {'nodes':>5} {'edges':>5} {'analyse':>8} {'sched':>8} {'ast':>8} "
          f"{'compile':>8} {'run':>8}")
    for r in rows[:10]:
        print(f"{r.test[:58]:58} {r.nodes:5d} {r.edges:5d} {r.analyse_s * 1e3:7.1f}ms {r.schedule_s * 1e3:7.1f}ms "
              f"{r.ast_s * 1e3:7.1f}ms {r.compile_s * 1e3:7.1f}ms {r.run_s * 1e3:7.1f}ms")
    total_compile = sum(r.compile_s for r in rows)
    print(f"\n{len(rows)} program runs; total compile {total_compile:.2f}s, "
          f"total run {sum(r.run_s for r in rows):.2f}s; largest: {rows[0].test}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump({"rows": [asdict(r) for r in rows]}, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
