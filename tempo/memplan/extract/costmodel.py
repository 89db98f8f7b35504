"""The documented cost model that turns a compiled program into a game instance.

An instruction's latency is a roofline over two memory tiers:

    L(S) = overhead + max(flops / peak_flops,
                          sum(size(b) / fast_bandwidth for b in S)
                          + sum(size(b) / slow_bandwidth for b not in S))

where ``S`` is the set of its operand/output buffers in fast memory. From it,
as in Appendix A: a buffer's benefit is ``L({}) - L({b})``, the instruction's
copy supply is ``L(all buffers)``, a buffer's demand is ``size /
copy_bandwidth``, and per-instruction latency tables cover every subset of
its 8 largest buffers. Times are in microseconds. The default tiers are an
accelerator with HBM as slow memory and an on-chip SRAM as fast memory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tempo.memplan.extract.xla_dump import Instruction

DOT_LABELS = ("dot_general", "conv_general")
TABLE_BUFFERS = 8


@dataclass(frozen=True)
class CostModel:
    """Hardware constants of the roofline (bytes/s, flop/s, seconds)."""

    peak_flops: float = 1.0e14
    slow_bandwidth: float = 6.0e11
    fast_bandwidth: float = 2.4e12
    copy_bandwidth: float = 3.0e11
    overhead: float = 1.0e-7

    def flops(self, inst: Instruction, elements: dict[str, int]) -> float:
        """Floating-point operations of ``inst``: contractions from shapes, else elementwise."""
        out = max(inst.elements, 1)
        is_dot = inst.opcode in ("dot", "convolution") or any(
            label in inst.label for label in DOT_LABELS)
        sizes = sorted((elements.get(o, 0) for o in inst.operands), reverse=True)
        if is_dot and len(sizes) >= 2 and sizes[1] > 0:
            contracted = math.sqrt(sizes[0] * sizes[1] / out)
            return 2.0 * out * max(contracted, 1.0)
        return float(out * max(len(inst.operands), 1))

    def latency(self, flops: float, fast: list[int], slow: list[int]) -> float:
        """Microseconds of one instruction with ``fast`` / ``slow`` buffer sizes (bytes)."""
        memory = sum(fast) / self.fast_bandwidth + sum(slow) / self.slow_bandwidth
        return 1e6 * (self.overhead + max(flops / self.peak_flops, memory))

    def demand(self, size: int) -> float:
        """Microseconds to copy ``size`` bytes between the tiers."""
        return 1e6 * size / self.copy_bandwidth

    def table(self, flops: float, sizes: list[int], rest: list[int]) -> list[float]:
        """Latency for every subset (bitmask) of ``sizes`` in fast memory; ``rest`` stays slow."""
        out = []
        for mask in range(1 << len(sizes)):
            fast = [s for i, s in enumerate(sizes) if mask >> i & 1]
            slow = [s for i, s in enumerate(sizes) if not mask >> i & 1]
            out.append(self.latency(flops, fast, slow + rest))
        return out
