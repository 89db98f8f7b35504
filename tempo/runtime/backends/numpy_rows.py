"""A fused island's chains of float32 elementwise steps, each one native call (the NumPy backend's
row programs, opt-in: ``NumPyBackend(row_programs=True)``).

A decoding step runs, per layer, a few dozen NumPy calls on rows of a few
hundred floats: an RMSNorm (``x * x``, its mean, ``+ eps``, ``** -0.5``,
``x * that``), the rotary embedding's products and sum, SwiGLU's sigmoid and
products, the residual adds. Each call costs about a microsecond of NumPy's
dispatch, more than its arithmetic. :func:`chains` finds, in an island, groups
of such steps over arrays of one shape ``(lead..., n)`` or ``(lead..., 1)``
(elementwise ``neg``, ``exp``, ``sqrt``, ``sigmoid``, ``relu``, ``add``,
``sub``, ``mul``, ``div``, ``maximum``, ``minimum``, ``pow``, and ``sum``,
``mean``, ``max`` over the last axis, kept), and turns each group, once, into
a :class:`RowProgram`: a list of instructions that ``numpy_rows.c`` (built
once with this machine's C compiler by :mod:`tempo.runtime.native`, the same
for every program) runs one row at a time, its intermediate values in a
scratch buffer that stays in the cache. A call passes the arrays themselves
and the C code reads their data, shapes and strides from the objects, so a
group costs one ``ctypes`` call and the allocation of its outputs: 1.2-3 us
for a decoding step's norms, rotary products and SwiGLU against 3-8 us for
their NumPy calls (``benchmarks/numpy_rows.py``).

The results equal NumPy's to float32 rounding (exp is a polynomial, the sums
run in another order), not bit for bit: hence opt-in. Where the arrays do not
fit at run time (another dtype, a row whose floats are not one after the
other, the source not built), the line runs the steps' own calls.
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable

import numpy as np

from tempo.ir import ops
from tempo.runtime import native

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "numpy_rows.c")
MAX_ARRAYS, MAX_REGISTERS, MAX_NDIM = 16, 64, 8  # what run() takes: arrays (inputs, outputs), registers, axes
SIGNATURES = {"run": [ctypes.c_void_p, ctypes.py_object], "layout": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]}
UNARY = {"neg": 0, "exp": 1, "sqrt": 2, "sigmoid": 3, "relu": 4}
BINARY = {"add": 10, "sub": 11, "mul": 12, "div": 13, "maximum": 14, "minimum": 15, "pow": 16}
REDUCE = {"sum": 20, "mean": 21, "max": 22}
_F32 = np.dtype(np.float32)

KERNELS = native.Kernels(SOURCE, SIGNATURES, "the row program kernel is", "elementwise chains run with NumPy ops")


def library() -> ctypes.PyDLL | None:
    """The library, loaded holding the GIL (its calls read Python objects) and told where this
    Python keeps an array's and a tuple's fields (:func:`object_fields`); None where it cannot be
    built or the fields are not where NumPy's and CPython's headers put them."""
    if "ready" not in KERNELS.loaded:
        built, fields, lib = KERNELS.library(), object_fields(), None
        if built is not None and fields is not None:
            lib = ctypes.PyDLL(built._name)
            for name, argtypes in SIGNATURES.items():
                getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, None
            lib.run.restype = ctypes.c_int
            offsets = np.array(fields, np.int64)
            lib.layout(offsets.ctypes.data, id(np.ndarray), id(_F32))
        KERNELS.loaded["ready"] = lib
    return KERNELS.loaded["ready"]


def object_fields() -> tuple[int, ...] | None:
    """The byte offsets, in an ndarray object, of its type, data pointer, number of axes, shape
    pointer, strides pointer and dtype (NumPy's ``PyArrayObject_fields`` after CPython's object
    header), then of a tuple's first item (its length just before), each checked on probe objects;
    None where they are not found there."""
    found = None
    for probe in (np.zeros((3, 7), np.float32)[:, 2:], np.zeros((2, 3, 9), np.float32)[..., 1:]):
        words = (ctypes.c_int64 * (np.ndarray.__basicsize__ // 8)).from_address(id(probe))
        head = next((8 * k for k in range(2, len(words) - 5) if words[k - 1] == id(np.ndarray)
                     and words[k] == probe.ctypes.data and words[k + 5] == id(probe.dtype)
                     and words[k + 1] & 0xFFFFFFFF == probe.ndim), None)
        if head is None or found not in (None, head):
            return None
        at = head // 8
        shape, strides = ((ctypes.c_int64 * probe.ndim).from_address(words[at + j]) for j in (2, 3))
        if tuple(shape) != probe.shape or tuple(strides) != probe.strides:
            return None
        found = head
    pair = (probe, shape)
    words = (ctypes.c_int64 * (tuple.__basicsize__ // 8 + 2)).from_address(id(pair))
    items = next((8 * k for k in range(1, len(words) - 1) if words[k] == id(probe) and words[k + 1] == id(shape)), None)
    if items is None or items != tuple.__basicsize__ or words[items // 8 - 1] != len(pair):
        return None
    return found - 8, found, found + 8, found + 16, found + 24, found + 40, items


def chains(op: ops.FusedOp, call_of: Callable, taken: set[int], unbound: set[int]) -> dict[int, tuple]:
    """The island's groups of steps a :class:`RowProgram` runs, none of the steps ``taken`` nor
    reading a value of the steps ``unbound`` (another line's): ``{the group's last step: (its other
    steps, the line's function, what it reads, what it binds)}``. A group's steps have outputs of
    one shape ``(lead..., n)`` or ``(lead..., 1)``, each reads a value of the group or shares none
    with it, every value of the group read outside it is read after the group's last step, and it
    takes at most :data:`MAX_ARRAYS` arrays; groups of one step are left to NumPy."""
    if library() is None:
        return {}
    steps, readers, exposed = op.steps, {}, set(op.outputs)
    for s, step in enumerate(steps):
        for ref in step.inputs:
            readers.setdefault(ref, []).append(s)
    groups: list[dict] = []  # each: {"shape": (lead, n), "steps": [...]}
    group_of: dict[int, dict] = {}
    for s, step in enumerate(steps):
        shape = None if s in taken or any(j in unbound for j, _ in step.inputs) else _row_shape(step, steps)
        if shape is None:
            continue
        group = {"shape": shape, "steps": [s]}
        for g in {id(group_of[j]): group_of[j] for j, _ in step.inputs if j in group_of}.values():
            members = set(g["steps"]) | set(group["steps"])
            if _fits(g["shape"], group["shape"]) and all(
                    r >= s or r in members for j in members for r in readers.get((j, 0), ())):
                group = {"shape": _joined(g["shape"], group["shape"]), "steps": sorted(members)}
                groups[:] = [other for other in groups if other is not g]
        groups.append(group)
        for j in group["steps"]:
            group_of[j] = group
    found = {}
    for group in groups:
        program = RowProgram.of(steps, group["steps"], group["shape"], readers, exposed)
        if program is not None:
            found[group["steps"][-1]] = (tuple(group["steps"][:-1]), program.line(steps, call_of), program.reads,
                                         program.binds)
    return found


def _row_shape(step: ops.FusedStep, steps) -> tuple | None:
    """``(lead, n)`` for a step a row program runs whose output is (lead..., n) (``n`` None where it is
    (lead..., 1)); None for other steps."""
    op, shape = step.op, tuple(step.shapes[0]) if step.shapes else None
    if (step.dtypes != ("float32",) or not shape or not all(isinstance(d, int) for d in shape)
            or any(j >= 0 and steps[j].dtypes[k] != "float32" for j, k in step.inputs)):
        return None
    if isinstance(op, ops.ElementwiseOp):
        arity = 1 if op.fn in UNARY else 2 if op.fn in BINARY else 0
        if len(step.inputs) != arity:
            return None
    elif not (isinstance(op, ops.ReduceOp) and op.fn in REDUCE and op.keepdims and not op.ordered
              and op.axes in ((-1,), (len(shape) - 1,)) and shape[-1] == 1):
        return None
    return shape[:-1], (shape[-1] if shape[-1] > 1 else None)


def _fits(a: tuple, b: tuple) -> bool:
    """Whether values of the shapes ``a`` and ``b`` (``(lead, n)``, ``n`` None: unknown) are rows of one shape."""
    return a[0] == b[0] and (None in (a[1], b[1]) or a[1] == b[1])


def _joined(a: tuple, b: tuple) -> tuple:
    return a[0], a[1] if a[1] is not None else b[1]


class RowProgram:
    """A group of steps as the instructions ``numpy_rows.c`` runs: ``reads`` (the group's inputs,
    step outputs or island inputs) then ``binds`` (the values read outside it) are its arrays,
    ``code`` the program (see :meth:`of`), ``shapes`` the outputs' shapes."""

    def __init__(self, code: np.ndarray, reads: tuple, binds: tuple, shapes: tuple, order: tuple):
        self.code, self.reads, self.binds, self.shapes, self.order = code, reads, binds, shapes, order

    @classmethod
    def of(cls, steps, order: list[int], shape: tuple, readers: dict, exposed: set) -> RowProgram | None:
        """The program of the steps ``order`` (their outputs of ``shape``, ``(lead, n)``), or None
        where it is not worth one (one step, ``n`` unknown or 1) or takes too many arrays or
        registers. The program: the number of arrays, row registers, scalar registers and
        instructions, the number of axes and the full shape (lead..., n), then each instruction's
        (opcode, destination, operand, operand) as slots: the arrays, then the row registers,
        then the scalar registers."""
        (lead, n), members = shape, set(order)
        if len(order) < 2 or n is None:
            return None
        reads = tuple(dict.fromkeys(ref for s in order for ref in steps[s].inputs if ref[0] not in members))
        binds = tuple((s, 0) for s in order
                      if (s, 0) in exposed or any(r not in members for r in readers.get((s, 0), ())))
        arrays = {ref: k for k, ref in enumerate(reads + binds)}
        if len(arrays) > MAX_ARRAYS or len(lead) + 1 > MAX_NDIM:
            return None
        last = {ref: s for s in order for ref in steps[s].inputs}
        free: dict[bool, list[int]] = {True: [], False: []}  # kind (a row) -> registers free
        count, register, instructions = {True: 0, False: 0}, {}, []
        for s in order:
            step = steps[s]
            for ref in dict.fromkeys(step.inputs):  # registers read for the last time are free after this step
                if ref in register and last[ref] == s:
                    free[register[ref][0]].append(register[ref][1])
            if (s, 0) not in arrays:
                row = step.shapes[0][-1] == n
                if not free[row]:
                    free[row].append(count[row])
                    count[row] += 1
                register[(s, 0)] = (row, free[row].pop())
            instructions.append((s, step))
        if count[True] + count[False] > MAX_REGISTERS:
            return None

        def slot(ref):
            if ref in arrays:
                return arrays[ref]
            row, k = register[ref]
            return len(arrays) + (k if row else count[True] + k)

        code = [len(arrays), count[True], count[False], len(instructions), len(lead) + 1, *lead, n]
        for s, step in instructions:
            fn = step.op.fn
            opcode = UNARY.get(fn, BINARY.get(fn, REDUCE.get(fn)))
            x = slot(step.inputs[0])
            code += [opcode, slot((s, 0)), x, slot(step.inputs[1]) if len(step.inputs) > 1 else x]
        shapes = tuple(tuple(steps[s].shapes[0]) for s, _ in binds)
        return cls(np.array(code, np.int64), reads, binds, shapes, tuple(order))

    def line(self, steps, call_of: Callable) -> Callable:
        """The island line's function: the group's arrays (``reads``) to its outputs (``binds``), by
        the native kernel where the arrays fit, else by the steps' own calls (each value of its
        step's dtype, as :func:`~tempo.runtime.backends.numpy_fused.compile_island`'s lines)."""
        run, address, shapes = library().run, self.code.ctypes.data, self.shapes
        empty, calls = np.empty, [(s, call_of(steps[s].op), steps[s].inputs) for s in self.order]
        at, binds = {ref: k for k, ref in enumerate(self.reads)}, self.binds

        def by_steps(*args):
            values = {ref: args[k] for ref, k in at.items()}
            for s, fn, inputs in calls:
                value = fn(*(values[ref] for ref in inputs))
                if value.__class__ is not np.ndarray or value.dtype is not _F32:
                    value = np.asarray(value).astype(_F32, copy=False)
                values[(s, 0)] = value
            return [values[ref] for ref in binds]

        if len(shapes) == 1:  # the usual line: one output, without a loop over the shapes
            shape, = shapes

            def rows(*args):
                out = empty(shape, _F32)
                if run(address, (*args, out)):
                    return by_steps(*args)
                return (out,)
        else:
            def rows(*args):
                outs = tuple([empty(shape, _F32) for shape in shapes])
                if run(address, args + outs):
                    return by_steps(*args)
                return outs

        rows.code = self.code  # the program the address points into, alive as long as the line
        return rows
