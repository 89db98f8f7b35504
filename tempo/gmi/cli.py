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

    train = commands.add_parser("train", help="train over many instances per device",
                                description="Sync PPO (holistic instances, TCG_EX) or async A3C "
                                            "(agent and trainer instances, TDG_EX).")
    train.add_argument("--env", default="CartPole-v1", help="gymnasium environment id")
    train.add_argument("--algo", default="ppo",
                       help="ppo, a3c, or tempo (every instance runs --program as a replica)")
    train.add_argument("--layout", default="auto", help="auto (Algorithm 2), DxN or e.g. 3,2,2")
    train.add_argument("--strategy", default="auto", help="auto (Algorithm 1), mpr, mrr or har")
    train.add_argument("--seconds", type=float, default=10.0, help="training time")
    train.add_argument("--num-envs", type=int, default=8, help="environments per instance")
    train.add_argument("--backend", default="auto", help="auto, cpu, mps or mig")
    train.add_argument("--run-dir", default=None, help="where checkpoints go (default: a temp dir)")
    train.add_argument("--checkpoint-every", type=int, default=10, help="iterations between checkpoints")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--program", default=None,
                       help="--algo tempo: a Tempo program file with Args and main(args), e.g. "
                            "examples/reinforce.py; it runs its own iteration count (--seconds "
                            "is not used), and gets --env and --seed when its Args has them")
    train.add_argument("--program-arg", action="append", default=[], metavar="NAME=VALUE",
                       help="--algo tempo: set one of the program's Args (repeatable)")
    train.set_defaults(func=_train)

    search = commands.add_parser("search", help="Algorithm 2: pick instances per device and "
                                                "environments per instance by profiling")
    search.add_argument("--env", default="CartPole-v1", help="gymnasium environment id")
    search.add_argument("--devices", type=int, default=1, help="devices the choice is for")
    search.add_argument("--instances", default="4,2,1", help="instances per device to try")
    search.add_argument("--envs", default="8,32,128", help="environments per instance to try")
    search.add_argument("--profile-seconds", type=float, default=3.0, help="seconds per point")
    search.add_argument("--alpha", type=float, default=0.05, help="saturation threshold")
    search.add_argument("--mem-budget-mb", type=float, default=None,
                        help="memory per device; points over it are not runnable")
    search.set_defaults(func=_search)
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


def _int_list(text: str, flag: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise TempoError(f"{flag} must be a comma list of integers, got {text!r}") from None


def _run_search(env: str, devices: int, instances: list[int], envs: list[int], seconds: float,
                alpha: float = 0.05, mem_budget_mb: float | None = None):
    from tempo.gmi.search import algorithm2, check_candidates, measured_profile

    check_candidates(instances, envs)
    profile = measured_profile(env, seconds, mem_budget_mb)

    def traced(count: int, num_envs: int):
        point = profile(count, num_envs)
        top = f"{point.top:9.0f} steps/s per instance" if point.runnable else "not runnable"
        print(f"  profiled {count} instance(s) x {num_envs:4d} envs: {top}, "
              f"{point.mem_mb:6.0f} MB {point.note}".rstrip())
        return point

    best, _ = algorithm2(traced, instances, envs, devices, alpha)
    if best is None:
        raise TempoError(f"no profiled configuration of {env} could run")
    print(f"choice: {best.instances} instance(s) per device x {best.num_envs} environments "
          f"(projected {best.projected:.0f} steps/s on {devices} device(s))")
    return best


def _search(args: argparse.Namespace) -> int:
    if args.devices < 1 or args.profile_seconds <= 0:
        raise TempoError("--devices must be >= 1 and --profile-seconds > 0")
    _run_search(args.env, args.devices, _int_list(args.instances, "--instances"),
                _int_list(args.envs, "--envs"), args.profile_seconds, args.alpha,
                args.mem_budget_mb)
    return 0


def _assignments(items: list[str]) -> dict[str, str]:
    pairs = [item.partition("=") for item in items]
    bad = [item for item, (_, eq, _) in zip(items, pairs) if not eq]
    if bad:
        raise TempoError(f"--program-arg takes NAME=VALUE, got {bad[0]!r}")
    return {name.replace("-", "_"): value for name, _, value in pairs}


def _train(args: argparse.Namespace) -> int:
    from tempo.gmi.layout import Layout
    from tempo.gmi.ppo import PPOConfig
    from tempo.gmi.train_run import TrainJob, train

    if args.seconds <= 0:
        raise TempoError(f"--seconds must be > 0, got {args.seconds}")
    num_envs, layout = args.num_envs, None
    if args.layout == "auto":
        print("layout auto: Algorithm 2 search")
        best = _run_search(args.env, 1, [2, 1], [args.num_envs, 4 * args.num_envs], 2.0)
        layout, num_envs = Layout((best.instances,)), best.num_envs
    config = PPOConfig(env_id=args.env, num_envs=num_envs, seed=args.seed)
    layout = layout or Layout.parse(args.layout)
    job = TrainJob(layout, args.algo, args.strategy, args.seconds, config=config,
                   backend=args.backend, run_dir=args.run_dir,
                   checkpoint_every=args.checkpoint_every, program=args.program,
                   program_args=_assignments(args.program_arg))
    train(job)
    return 0


def main(argv: Sequence[str]) -> int:
    """Entry point of ``tempo gmi``; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(list(argv))
    from tempo.gmi.errors import InstanceFailure

    try:
        return args.func(args)
    except InstanceFailure as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except TempoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
