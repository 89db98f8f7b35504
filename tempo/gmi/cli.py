"""``tempo gmi``: many RL instances per device (GMI-DRL).

Commands: ``train`` (sync PPO / async A3C over a layout), ``search``
(Algorithm 2) and ``bench-reduce`` (time and check the reduction strategies).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tempo.errors import TempoError

PROG = "tempo gmi"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    bench = commands.add_parser("bench-reduce", help="time and check the gradient reductions",
                                description="Reduce random gradients across the instances of a "
                                            "layout with each strategy; exit 1 if any result is "
                                            "off the float64 sum by more than 1e-5.")
    bench.add_argument("--layout", required=True, help="DxN or instances per device, e.g. 3,2,2")
    bench.add_argument("--strategy", default="all", help="mpr, mrr, har, auto or all")
    bench.add_argument("--size-mb", type=float, default=4.0, help="gradient size in MB")
    bench.add_argument("--repeats", type=int, default=5, help="timed reductions per strategy")
    bench.add_argument("--backend", default="auto", help="auto, cpu, mps or mig")
    bench.set_defaults(func=_bench_reduce)
    return parser


def _bench_reduce(args: argparse.Namespace) -> int:
    from tempo.gmi.layout import Layout
    from tempo.gmi.reduce_run import COLUMNS, bench_reduce, runnable_strategies
    from tempo.gmi.strategy import select_strategy, resolve_strategy
    from tempo.gmi.table import format_table

    layout = Layout.parse(args.layout)
    if args.size_mb <= 0 or args.repeats < 1:
        raise TempoError(f"--size-mb must be > 0 and --repeats >= 1, got {args.size_mb}, {args.repeats}")
    requested = resolve_strategy(args.strategy, layout.mpl) if args.strategy != "all" else "all"
    strategies, skipped = runnable_strategies(requested, layout)
    print(f"layout {layout}: {layout.world_size} instances on {layout.num_devices} device(s); "
          f"Algorithm 1 picks {select_strategy(layout.mpl)}")
    for note in skipped:
        print(note)
    rows = bench_reduce(layout, strategies, args.size_mb, args.repeats, backend=args.backend)
    print(format_table(rows, COLUMNS))
    return 0 if all(row["ok"] == "yes" for row in rows) else 1


def main(argv: Sequence[str]) -> int:
    """Entry point of ``tempo gmi``; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(list(argv))
    try:
        return args.func(args)
    except TempoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
