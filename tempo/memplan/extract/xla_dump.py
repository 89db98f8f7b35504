"""XLA's own view of a compiled program: schedule, operands, buffer sizes and live ranges.

A JAX function is compiled with XLA's dump options on; from the dump we read
the scheduled instruction sequence of the entry computation (its order is the
game's logical time), each instruction's operands, and from XLA's buffer
assignment every value's size, allocation and live range.
"""
from __future__ import annotations

import glob
import math
import os
import re
import tempfile
from dataclasses import dataclass

from tempo.memplan.problem import MemplanError

_LIVE = re.compile(r"^\s+(\S+)\{\}:(\d+)-(\d+)$")
_VALUE = re.compile(r"value: <\d+ (\S+?)(?:\{\})? @\d+> \(size=(\d+),offset=(\d+)\)")
_ALLOC = re.compile(r"^allocation (\d+):")
_ARRAY = re.compile(r"\w+\[([\d,]*)\]")
_NAMES = re.compile(r"%([\w.\-]+)")


@dataclass
class Instruction:
    """One scheduled HLO instruction of the entry computation."""

    name: str
    opcode: str
    operands: list[str]
    elements: int                 # elements of its (array) result; 0 for tuples
    label: str                    # metadata op_name, e.g. "jit(step)/dot_general"


@dataclass
class Trace:
    """The compiled program: instructions in schedule order, value sizes, allocations, live ranges."""

    name: str
    sequence: list[Instruction]
    size: dict[str, int]
    allocation: dict[str, tuple[int, int]]
    live: dict[str, tuple[int, int]]


def _balanced(text: str, start: int) -> int:
    """Index just past the parenthesis group opening at ``text[start]``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return len(text)


def _instruction(line: str) -> Instruction | None:
    line = line.strip().removeprefix("ROOT ")
    if " = " not in line:
        return None
    name, rest = line.split(" = ", 1)
    if rest.startswith("("):
        end = _balanced(rest, 0)
        shape, rest = rest[:end], rest[end:].lstrip()
        elements = 0
    else:
        shape, rest = rest.split(" ", 1)
        dims = _ARRAY.match(shape)
        elements = math.prod(int(d) for d in dims.group(1).split(",") if d) if dims else 0
    opcode, rest = rest.split("(", 1)
    args = rest[: _balanced("(" + rest, 0) - 2]
    label = re.search(r'op_name="([^"]*)"', rest)
    return Instruction(name.lstrip("%"), opcode, _NAMES.findall(args), elements,
                       label.group(1) if label else "")


def _entry(text: str) -> dict[str, Instruction]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ENTRY"))
    out = {}
    for line in lines[start + 1:]:
        if line.startswith("}"):
            break
        inst = _instruction(line)
        if inst is not None:
            out[inst.name] = inst
    return out


def _read(folder: str, suffix: str) -> str:
    paths = [p for p in glob.glob(os.path.join(folder, f"*{suffix}"))
             if "jit_" in os.path.basename(p)]
    if not paths:
        raise MemplanError(f"XLA wrote no '*{suffix}' dump (is this XLA version supported?)")
    with open(max(paths, key=os.path.getsize)) as f:
        return f.read()


def parse_dump(folder: str, name: str) -> Trace:
    """Read the dump XLA wrote into ``folder`` for one compiled function."""
    entry = _entry(_read(folder, "cpu_after_optimizations.txt"))
    live_text = _read(folder, "cpu_after_optimizations-live-range.txt")
    order = re.findall(r"^\s+(\d+):(\S+)$", live_text, re.M)
    sequence = [entry[n] for _, n in sorted(order, key=lambda x: int(x[0])) if n in entry]
    live = {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in map(_LIVE.match, live_text.splitlines()) if m}
    size, allocation, current = {}, {}, -1
    for line in _read(folder, "cpu_after_optimizations-buffer-assignment.txt").splitlines():
        if (m := _ALLOC.match(line)) is not None:
            current = int(m.group(1))
        elif (m := _VALUE.search(line)) is not None:
            size[m.group(1)] = int(m.group(2))
            allocation[m.group(1)] = (current, int(m.group(3)))
    return Trace(name, sequence, size, allocation, live)


def compile_and_trace(fn, args, name: str) -> Trace:
    """Compile ``fn(*args)`` with XLA and read back its schedule and buffer assignment."""
    import jax

    with tempfile.TemporaryDirectory(prefix="memplan-xla-") as folder:
        jax.jit(fn).lower(*args).compile(
            compiler_options={"xla_dump_to": folder, "xla_dump_hlo_as_text": True})
        return parse_dump(folder, name)
