"""Stopping at end-of-sequence: what the run-time end of the decoding dim costs and saves.

The random-weight Llama of ``benchmarks/decode.py`` (26M parameters) decodes a
batch greedily on the NumPy backend (``--backend jax``: JAX, on its CPU device
here), one thread (for JAX ``PJRT_NPROC=1``: XLA's CPU client otherwise runs a
program's independent operations on a pool of one thread per core, and
``--xla_cpu_multi_thread_eigen=false`` keeps one operation on one thread), three ways, each program
compiled once and run ``--repeats`` times, interleaved:

- **fixed**: ``max_new_tokens`` tokens with no end check (``stop_at_eos=False``);
- **check**: the same tokens with the end check of ``stop_at_eos`` (``tpo.end_when``)
  for a token no sequence produces, so the loop runs the same steps and the
  difference is what the check costs (the issue asks for < 5% per token);
- **eos**: stopping at tokens the batch's sequences produce at different steps
  (:func:`eos_tokens`): the run ends at the step of the longest sequence's EOS.

Each row: process CPU and wall seconds of a run (the least of the repeats, and
the median wall), the CPU per step XLA's threads ran in the run of least CPU
(``tf_XLA...`` threads in ``/proc/self/task``; the rest is the host's Python), the decoding steps the ids keep and the steps the loop ran
(``program.end_checks``: with ``--every k`` a loop the host runs may run up to
``k - 1`` past the end; a device loop on JAX, none), tokens per second (new tokens of the batch over the least wall), the CPU
per step, the run's launches per step (kernels and device loops, the prompt's
included: ``program.ledger``)
and the host reads of the end flag.
The machine is shared: process CPU time is the steadier figure.

    .venv/bin/python benchmarks/decode_eos.py                 # about two minutes
    .venv/bin/python benchmarks/decode_eos.py --quick         # a few seconds
    .venv/bin/python benchmarks/decode_eos.py --backend jax --attention masked --repeats 7 \
        --out docs/results/decode_eos_jax.json                # JAX: the loop over t as one device program
    .venv/bin/python benchmarks/decode_eos.py --backend jax --attention masked --repeats 7 --every 8 \
        --out docs/results/decode_eos_jax_every8.json         # the flag read every 8 steps
    .venv/bin/python benchmarks/decode_eos.py --attention masked --batch 1 --repeats 5 \
        --out docs/results/decode_eos_numpy_masked_b1.json    # per step against JAX's (docs/llm.md)
    .venv/bin/python benchmarks/decode_eos.py --backend jax --attention masked --batch 1 --repeats 5 \
        --out docs/results/decode_eos_jax_masked_b1.json      # (and --batch 4: ..._b4.json)
    .venv/bin/python benchmarks/decode_eos.py --backend jax --attention window --window 32 --batch 1 \
        --out docs/results/decode_eos_jax_window_b1.json      # window decoding on JAX (docs/llm.md)
    .venv/bin/python benchmarks/decode_eos.py --backend jax --attention causal --fixed-only --batch 1 \
        --out docs/results/decode_eos_jax_causal_b1.json      # causal decoding on JAX (docs/llm.md)

Prints a table and writes ``docs/results/decode_eos.json``.
"""
from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PJRT_NPROC"):
    os.environ[_name] = "1"  # PJRT_NPROC: XLA's CPU client runs a program's operations on one thread
os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"  # and no operation is split over threads

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode import ROOT, Size, model_config, weights  # noqa: E402


def compiled(config, wts, prompt: np.ndarray, stop_tokens: tuple | None, backend: str, attention: str, new: int,
             every: int | None):
    """The decoding program of ``prompt`` on ``backend``, ending at ``stop_tokens`` (None: no end
    check), with ``attention`` (``tempo.llm.attention.Attention.parse``; masked: causal attention
    over buffers of ``new`` rows); ``every``: steps between host reads of the end flag (None: the
    runtime's choice)."""
    import tempo as tpo
    from tempo.llm import program as program_mod
    from tempo.llm.attention import Attention
    from tempo.llm.sampling import Sampling

    with tpo.Context() as ctx:
        dp = program_mod.build(config, wts, prompt, Attention.parse(attention), Sampling(),
                               stop_at_eos=stop_tokens is not None, stop_tokens=stop_tokens, capacity=new)
        config = None if every is None else tpo.Config(end_check_every=every)
        return dp, ctx.compile(fetch=[dp.first, dp.tokens], backend=backend, config=config,
                               passes=program_mod.compile_passes(dp, backend, new))


def xla_cpu_seconds() -> float:
    """The CPU seconds the process's XLA threads (named ``tf_XLA...``) have run, from ``/proc``
    (clock ticks: 10 ms apart)."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if not f.read().startswith("tf_XLA"):
                    continue
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def timed(dp, program, layers: int, new: int) -> dict:
    """One run: its process CPU and wall seconds (and the CPU of XLA's threads among it), the steps
    it ran and the new tokens' ids, the launches it made (kernels and device loops) and the host
    reads of its end flag."""
    cpu, wall, xla = time.process_time(), time.perf_counter(), xla_cpu_seconds()
    first, tokens = program.run(dp.bounds(layers, new))
    wall, cpu, xla = time.perf_counter() - wall, time.process_time() - cpu, xla_cpu_seconds() - xla
    steps = int(program.lengths[dp.positions[1].name]) if dp.ends else tokens.shape[0]
    ids = np.concatenate([first[:, None], tokens[:steps].T], axis=1).astype(np.int64)
    check = next(iter(program.end_checks.values()), None)
    return {"cpu_s": cpu, "wall_s": wall, "xla_cpu_s": xla, "steps": steps, "ids": ids, "launches": program.ledger.launches,
            "flag_reads": 0 if check is None else check.reads, "steps_run": steps if check is None else check.steps}


def eos_tokens(ids: np.ndarray) -> tuple[int, ...]:
    """End-of-sequence tokens for the batch ``ids`` (batch, new) so that its sequences end at
    different steps: row ``b``'s token at step ``(b + 1) new / (batch + 1)`` (a row ends at the
    first of these tokens it produces, which may come earlier)."""
    batch, new = ids.shape
    return tuple(sorted({int(ids[b, (b + 1) * new // (batch + 1)]) for b in range(batch)}))


def first_steps(ids: np.ndarray, eos: tuple) -> list[int]:
    """The step at which each row of ``ids`` first produces one of ``eos`` (None: never)."""
    hits = np.isin(ids, eos)
    return [int(np.argmax(row)) if row.any() else None for row in hits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    parser.add_argument("--new", type=int, default=128, help="max_new_tokens")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", default="numpy", choices=["numpy", "jax"])
    parser.add_argument("--attention", default="causal", choices=["causal", "masked", "window"],
                        help="masked: causal over buffers of --new rows written in the program; window: of --window")
    parser.add_argument("--window", type=int, default=32, help="the window of --attention window")
    parser.add_argument("--every", type=int, default=None,
                        help="steps between host reads of the end flag (default: the runtime's choice)")
    parser.add_argument("--launch-steps", type=int, default=None,
                        help="the most steps of a device loop's launch without an end check "
                             "(tempo.runtime.device_loops.DeviceLoop.chunk; default: the runtime's)")
    parser.add_argument("--fixed-only", action="store_true",
                        help="only the fixed run: no program with an end check")
    parser.add_argument("--quick", action="store_true", help="a few tokens, to check the script")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "decode_eos.json"))
    ns = parser.parse_args()
    if ns.quick:
        ns.new, ns.repeats = 16, 2
    if ns.launch_steps:
        from tempo.runtime.device_loops import DeviceLoop

        DeviceLoop.chunk = ns.launch_steps
    size = Size()
    config, wts = model_config(size, ns.prompt + ns.new), weights(size, ns.prompt + ns.new)
    prompt = np.random.default_rng(0).integers(0, size.vocab, (ns.batch, ns.prompt))
    attention = f"window:{ns.window}" if ns.attention == "window" else ns.attention
    options = (ns.backend, attention, ns.new, ns.every)
    fixed = compiled(config, wts, prompt, None, *options)
    free = np.concatenate([prompt, timed(*fixed, size.layers, ns.new)["ids"]], axis=1)
    never = next(x for x in range(size.vocab) if x not in free)
    eos = eos_tokens(free[:, ns.prompt:])
    programs = {"fixed": fixed} if ns.fixed_only else \
        {"fixed": fixed, "check": compiled(config, wts, prompt, (never,), *options),
         "eos": compiled(config, wts, prompt, eos, *options)}
    runs = {name: [] for name in programs}
    for _ in range(ns.repeats):
        for name, (dp, program) in programs.items():
            runs[name].append(timed(dp, program, size.layers, ns.new))
    rows = []
    for name, results in runs.items():
        assert all(np.array_equal(r["ids"], results[0]["ids"]) for r in results)
        steps = results[0]["steps"]
        tokens = ns.batch * (steps + 1)
        cpu, wall = min(r["cpu_s"] for r in results), min(r["wall_s"] for r in results)
        rows.append({"run": name, "steps": steps, "new_tokens": steps + 1, "cpu_s": cpu, "wall_s": wall,
                     "wall_median_s": statistics.median(r["wall_s"] for r in results),
                     "tokens_per_s": tokens / wall, "cpu_ms_per_step": 1e3 * cpu / steps,
                     "xla_cpu_ms_per_step": 1e3 * min(results, key=lambda r: r["cpu_s"])["xla_cpu_s"] / steps,
                     "launches_per_step": results[-1]["launches"] / steps, "flag_reads": results[-1]["flag_reads"],
                     "steps_run": results[-1]["steps_run"],
                     "runs_cpu_s": [r["cpu_s"] for r in results], "runs_wall_s": [r["wall_s"] for r in results]})
    overhead = None
    if not ns.fixed_only:
        np.testing.assert_array_equal(runs["check"][0]["ids"], free[:, ns.prompt:])
        ends = first_steps(free[:, ns.prompt:], eos)
        assert runs["eos"][0]["steps"] == max(ends)                  # the longest sequence's EOS ends the loop
        base, check = rows[0], rows[1]
        overhead = {"cpu_per_step": check["cpu_ms_per_step"] / base["cpu_ms_per_step"] - 1,
                    "wall": check["wall_s"] / base["wall_s"] - 1}
    print(f"{'run':6} {'steps':>6} {'run':>4} {'cpu s':>7} {'wall s':>7} {'median':>7} {'tok/s':>7} "
          f"{'cpu ms/step':>12} {'of it XLA':>9} {'launches/step':>14} {'flag reads':>10}")
    for r in rows:
        print(f"{r['run']:6} {r['steps']:6d} {r['steps_run']:4d} {r['cpu_s']:7.3f} {r['wall_s']:7.3f} "
              f"{r['wall_median_s']:7.3f} {r['tokens_per_s']:7.1f} {r['cpu_ms_per_step']:12.2f} {r['xla_cpu_ms_per_step']:9.2f} "
              f"{r['launches_per_step']:14.2f} {r['flag_reads']:10d}")
    if overhead is not None:
        print(f"end check overhead: {100 * overhead['cpu_per_step']:+.1f}% CPU per step, "
              f"{100 * overhead['wall']:+.1f}% wall")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    report = {"size": asdict(size), "parameters": size.parameters(), "commit": commit.strip(),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared",
              "load_1min": os.getloadavg()[0], "backend": ns.backend, "attention": attention, "threads": 1,
              "end_check_every": ns.every, "launch_steps": ns.launch_steps,
              "batch": ns.batch, "prompt": ns.prompt, "max_new_tokens": ns.new, "repeats": ns.repeats, "eos": eos,
              "never": never,
              "fixed_only": ns.fixed_only,
              "eos_first_steps": first_steps(free[:, ns.prompt:], eos), "rows": rows, "overhead": overhead}
    from tempo.files import write_json_atomic
    write_json_atomic(ns.out, report)
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
