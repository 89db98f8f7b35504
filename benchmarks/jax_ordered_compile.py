"""What XLA's compilation of the step-ordered kernels (``tempo/runtime/backends/jax_ordered.py``) costs,
against XLA's own sums and dots of the same shapes.

The shapes are those of the learner of ``examples/reinforce.py`` on CartPole-v1 as tensor ops at batch
32 and the cap of 500 steps (``benchmarks/ended_jax_time_split.py``'s program; its device program holds
each as many times as :data:`IN_LEARNER` says), and a weight's gradient contracted over the steps and a product
contracting them (rows ``B*T``). Each kernel is traced, lowered and compiled alone under ``jax.jit``
(a constant added to its result, different at each compile, so that no compile is reused), at one
thread (XLA's CPU client); the least process-CPU seconds of ``--repeats`` compiles is reported, less
that of a jit of one addition (the cost of any compile). Writes ``<out>.json``.

    .venv/bin/python benchmarks/jax_ordered_compile.py --out docs/results/jax_ordered_compile
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("PJRT_NPROC", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from tempo.files import write_json_atomic  # noqa: E402
from tempo.runtime.backends import jax_ordered  # noqa: E402


def shaped(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


KERNELS = {  # name -> (the ordered kernel, XLA's own, operand shapes)
    "sum over t and b (500, 32)": (lambda x: jax_ordered.ordered_sum(x, (0, 1)), lambda x: jnp.sum(x, (0, 1)),
                                   [shaped(500, 32)]),
    "sum over t (500, 32)": (lambda x: jax_ordered.ordered_sum(x, (0,)), lambda x: jnp.sum(x, 0), [shaped(500, 32)]),
    "sum over t and b (500, 32, 32)": (lambda x: jax_ordered.ordered_sum(x, (0, 1)), lambda x: jnp.sum(x, (0, 1)),
                                       [shaped(500, 32, 32)]),
    "sum over t and b (500, 32, 2)": (lambda x: jax_ordered.ordered_sum(x, (0, 1)), lambda x: jnp.sum(x, (0, 1)),
                                      [shaped(500, 32, 2)]),
    "rows (500, 32, 1, 2) @ (2, 32)": (lambda a, b: jax_ordered.ordered_matmul(a, b, (0,), False), jnp.matmul,
                                       [shaped(500, 32, 1, 2), shaped(2, 32)]),
    "rows (500, 32, 1, 32) @ (32, 32)": (lambda a, b: jax_ordered.ordered_matmul(a, b, (0,), False), jnp.matmul,
                                         [shaped(500, 32, 1, 32), shaped(32, 32)]),
    "contraction over t (32, 500, 64, 1), (32, 500, 1, 32)": (
        lambda a, b: jax_ordered.ordered_batch_contract(a, b, (1,)),
        lambda a, b: jnp.einsum("btmk,btkn->mn", a, b), [shaped(32, 500, 64, 1), shaped(32, 500, 1, 32)]),
    "product contracting t (64, 500) @ (500, 32)": (lambda a, b: jax_ordered.ordered_matmul(a, b, (), True),
                                                    jnp.matmul, [shaped(64, 500), shaped(500, 32)]),
}

IN_LEARNER = {"sum over t and b (500, 32)": 2, "sum over t (500, 32)": 1, "sum over t and b (500, 32, 32)": 2,
              "sum over t and b (500, 32, 2)": 1, "rows (500, 32, 1, 2) @ (2, 32)": 1,
              "rows (500, 32, 1, 32) @ (32, 32)": 1}  # the learner's kernels and how many of each it holds
_compiles = [0]


def compile_cpu(fn, args) -> float:
    """Process-CPU seconds of tracing, lowering and compiling ``fn`` of ``args`` (never reused)."""
    _compiles[0] += 1
    salt = float(_compiles[0])
    salted = jax.jit(lambda *xs: fn(*xs) + salt)
    start = time.process_time()
    salted.lower(*args).compile()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="compiles of each kernel; the least is reported")
    parser.add_argument("--out", default="jax_ordered_compile", help="writes <out>.json")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    least = lambda fn, shapes: min(compile_cpu(fn, shapes) for _ in range(args.repeats))  # noqa: E731
    base = least(lambda x: x + 1.0, [shaped(3)])
    rows = {name: {"ordered": least(ordered, shapes) - base, "xla": least(own, shapes) - base}
            for name, (ordered, own, shapes) in KERNELS.items()}
    print(f"XLA compile of the step-ordered kernels, process-CPU ms beyond a one-addition jit ({base * 1e3:.0f} ms), "
          f"least of {args.repeats}, one thread, load {load:.1f}-{os.getloadavg()[0]:.1f}")
    print(f"{'kernel':56s}{'ordered':>10s}{'XLA own':>10s}")
    for name, row in rows.items():
        print(f"{name:56s}{row['ordered'] * 1e3:10.0f}{row['xla'] * 1e3:10.0f}")
    total = {c: sum(count * rows[n][c] for n, count in IN_LEARNER.items()) for c in ("ordered", "xla")}
    print(f"{'the learner of reinforce.py (their sum, as many as it holds)':56s}"
          f"{total['ordered'] * 1e3:10.0f}{total['xla'] * 1e3:10.0f}")
    write_json_atomic(args.out + ".json", {"settings": vars(args), "load_average": load,
                                           "load_average_end": os.getloadavg()[0], "one_addition": base,
                                           "seconds": rows, "learner": total})
    print(f"wrote {args.out}.json")


if __name__ == "__main__":
    main()
