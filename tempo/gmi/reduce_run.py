"""Run the reduction benchmark over a layout (the driver behind ``tempo gmi bench-reduce``)."""
from __future__ import annotations

from tempo.gmi.errors import GMIError
from tempo.gmi.instance import Program
from tempo.gmi.layout import Layout
from tempo.gmi.manager import GMIManager
from tempo.gmi.strategy import STRATEGY_NAMES, check_strategy

TOLERANCE = 1e-5
COLUMNS = [("strategy", "strategy", "s"), ("size_mb", "size MB", ".2f"),
           ("time_ms", "time ms", ".3f"), ("algbw", "algbw GB/s", ".3f"),
           ("busbw", "busbw GB/s", ".3f"), ("max_rel_error", "max rel err", ".2e"),
           ("ok", "ok", "s")]


def runnable_strategies(requested: str, layout: Layout) -> tuple[list[str], list[str]]:
    """The strategies to run and, for ``all``, notes on those the layout cannot run."""
    if requested != "all":
        check_strategy(requested, layout.mpl)
        return [requested], []
    chosen, skipped = [], []
    for name in STRATEGY_NAMES:
        try:
            check_strategy(name, layout.mpl)
            chosen.append(name)
        except GMIError as exc:
            skipped.append(f"{name} skipped: {exc}")
    return chosen, skipped


def bench_reduce(layout: Layout, strategies: list[str], size_mb: float, repeats: int = 5,
                 seed: int = 0, backend: str = "auto") -> list[dict]:
    """One row per strategy: time, bandwidths (nccl-tests conventions) and error."""
    numel = max(1, int(size_mb * 2**20 / 4))
    program = Program("bench-reduce", ("trainer",),
                      {"strategies": strategies, "numel": numel, "repeats": repeats, "seed": seed})
    manager = GMIManager(layout, [program] * layout.world_size, backend=backend)
    rows = []
    n = layout.world_size
    for event in manager.run():
        if event.get("kind") != "reduce":
            continue
        size = event["numel"] * 4
        algbw = size / event["seconds"] / 1e9
        rows.append({"strategy": event["strategy"], "size_mb": size / 2**20,
                     "time_ms": event["seconds"] * 1e3, "seconds": event["seconds"],
                     "algbw": algbw, "busbw": algbw * 2 * (n - 1) / n,
                     "max_rel_error": event["max_rel_error"],
                     "ok": "yes" if event["max_rel_error"] <= TOLERANCE else "NO"})
    return rows
