"""The PyTorch backend: one eager kernel per op type, tensors on the CPU or a CUDA device.

Every kernel follows NumPy's rules where torch's differ: mixed dtypes are
promoted as NumPy promotes them (``int64 + float32`` is float64, ``int / int``
is float64), reductions over no axes are the identity, random numbers come
from the counter-based generator on the host (so they are NumPy's bits
exactly) and user functions (gymnasium environments) get NumPy arrays and
give back arrays, moved to the device.

A fused island runs its steps eagerly, one torch call each. ``torch.compile``
of an island is faster per call but does not pay back its compile within a
typical run: at the default RL point of ``benchmarks/rl_train.py`` (PPO,
512 environments, 2x64 MLPs; torch 2.13, one thread of a shared 2-core CPU),
the largest acting island (27 steps, run 250 times an iteration) takes
0.34 ms eagerly and 0.25 ms compiled, after a 16 s compile, and the learning
island (361 steps, once an iteration) 243 ms eagerly and 133 ms compiled,
after 13 s; the program has 19 islands, so compiling them costs minutes
and saves about 0.15 s an iteration (``benchmarks/torch_compile.py``).
"""
from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
import torch

from tempo.errors import TempoError
from tempo.ir import ops
from tempo.runtime.backends import numpy as np_backend
from tempo.runtime.backends import torch_ordered
from tempo.runtime.backends.base import Backend, Kernel, StepFailed, along
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import seq

DTYPES = {name: getattr(torch, name) for name in
          ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64")}
NP_DTYPE = {torch_dtype: np.dtype(name) for name, torch_dtype in DTYPES.items()}

KERNELS: dict[type, Callable] = {}  # op type -> (op, device) -> Kernel


def kernel_for(op_type: type):
    def wrap(factory):
        KERNELS[op_type] = factory
        return factory

    return wrap


def _promoted(np_fn: Callable, arity: int) -> Callable:
    """For input dtypes, ``(dtype to compute in, dtype of the result)`` under NumPy's rules (cached)."""
    cache: dict[tuple, tuple] = {}

    def rule(dtypes: tuple) -> tuple:
        found = cache.get(dtypes)
        if found is None:
            names = [NP_DTYPE[d] for d in dtypes]
            out = np.dtype(np_fn(*[np.ones((), n) for n in names]).dtype)
            common = np.result_type(*names[-arity:]) if names else out
            compute = out if out.kind == "f" and common.kind != "f" else common
            found = cache[dtypes] = (DTYPES[compute.name], DTYPES[out.name])
        return found

    return rule


def _abs(x):
    return x if x.dtype == torch.bool else torch.abs(x)


def _where(cond, a, b):
    return torch.where(cond.to(torch.bool), a, b)


ELEMENTWISE = {
    "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "abs": _abs,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "not": torch.logical_not, "sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil,
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.true_divide, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
    "ge": torch.ge, "eq": torch.eq, "ne": torch.ne, "and": torch.logical_and, "or": torch.logical_or,
    "mod": torch.remainder, "floordiv": torch.floor_divide, "where": _where,
}


def _same_dtype(xs: list) -> list:
    """``xs`` cast to the dtype NumPy would compute them in together."""
    dtypes = {x.dtype for x in xs}
    if len(dtypes) == 1:
        return xs
    common = DTYPES[np.result_type(*[NP_DTYPE[d] for d in dtypes]).name]
    return [x.to(common) for x in xs]


@kernel_for(ops.ElementwiseOp)
def _elementwise(op: ops.ElementwiseOp, device) -> Kernel:
    fn, np_fn = ELEMENTWISE[op.fn], np_backend.ELEMENTWISE[op.fn]
    arity = 2 if op.fn == "where" else 3
    rule = _promoted(np_fn, arity)
    lead = 1 if op.fn == "where" else 0  # where's condition keeps its dtype

    def run(inputs, env, point):
        compute, out = rule(tuple(x.dtype for x in inputs))
        args = inputs[:lead] + [x if x.dtype == compute else x.to(compute) for x in inputs[lead:]]
        result = fn(*args)
        return (result if result.dtype == out else result.to(out),)

    return run


@kernel_for(ops.ConstOp)
def _const(op: ops.ConstOp, device) -> Kernel:
    value = constant_tensor(op.value.array, device)
    return lambda inputs, env, point: (value[point] if op.num_domain_axes else value,)


def constant_tensor(array: np.ndarray, device):
    """A constant's tensor on ``device``: on the CPU, over the array's own memory (the constant is
    read as it is at each run; a read-only array too, a model's weights held once: no kernel of
    this backend writes into its inputs, only into the stores' buffers, ``write_into``)."""
    if array.flags.writeable or torch.device(device).type != "cpu":
        return torch.as_tensor(array, device=device)
    with warnings.catch_warnings():                    # torch warns that the tensor may be written
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def _host(np_kernel: Kernel, device) -> Kernel:
    """A NumPy kernel whose results are moved to ``device`` (random numbers, symbol values)."""
    def run(inputs, env, point):
        return tuple(torch.as_tensor(np.asarray(v), device=device) for v in np_kernel(inputs, env, point))

    return run


for _op_type in (ops.EvalSymbolOp, ops.RandomOp):
    KERNELS[_op_type] = lambda op, device: _host(np_backend.KERNELS[type(op)](op), device)


def _reduce_dtype(fn: str, dtype):
    """The dtype NumPy's reduction ``fn`` gives for ``dtype`` (sums of bools and small ints are int64)."""
    np_dtype = NP_DTYPE[dtype]
    return DTYPES[np.dtype(np_backend.REDUCERS[fn](np.ones((1,), np_dtype), axis=0).dtype).name]


ORDERED = {"sum": torch_ordered.ordered_sum, "mean": torch_ordered.ordered_mean}
"""A sum or mean whose ``ReduceOp`` is ``ordered``: each axis added in index order (:mod:`.torch_ordered`)."""


@kernel_for(ops.ReduceOp)
def _reduce(op: ops.ReduceOp, device) -> Kernel:
    axes, keep, fn = op.axes, op.keepdims, op.fn
    reducer = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[fn]
    ordered = ORDERED.get(fn) if op.ordered else None
    out_dtype = {}

    def run(inputs, env, point):
        x = inputs[0]
        dtype = out_dtype.get(x.dtype)
        if dtype is None:
            dtype = out_dtype[x.dtype] = _reduce_dtype(fn, x.dtype)
        if not axes:
            return (x if x.dtype == dtype else x.to(dtype),)
        if fn in ("sum", "mean") and x.dtype != dtype:
            x = x.to(dtype)
        if ordered is not None and x.is_floating_point():
            return (ordered(x, axes, keep).to(dtype),)
        return (reducer(x, dim=axes, keepdim=keep).to(dtype),)

    return run


@kernel_for(ops.ScanOp)
def _scan(op: ops.ScanOp, device) -> Kernel:
    def run(inputs, env, point):
        x = torch.movedim(inputs[0], op.axis, 0)
        if x.dtype == torch.bool and op.gamma == 1.0:
            x = x.to(torch.int64)  # NumPy counts: a running sum of bools is int64
        if op.window:
            pad = torch.zeros((op.window - 1, *x.shape[1:]), dtype=x.dtype, device=x.device)
            out = torch.cat([pad, x]).unfold(0, op.window, 1).sum(dim=-1)
            return (torch.movedim(out.to(x.dtype), 0, op.axis),)
        if op.reverse:
            x = torch.flip(x, (0,))
        if op.gamma == 1.0:
            out = torch.cumsum(x, dim=0)
        else:
            dtype = DTYPES[np.result_type(NP_DTYPE[x.dtype], np.float32).name]
            out = torch.empty(x.shape, dtype=dtype, device=x.device)
            carry = torch.zeros(x.shape[1:], dtype=dtype, device=x.device)
            for k in range(len(x)):
                carry = x[k] + op.gamma * carry
                out[k] = carry
        if op.reverse:
            out = torch.flip(out, (0,))
        return (torch.movedim(out, 0, op.axis),)

    return run


@kernel_for(ops.LinearScanOp)
def _linear_scan(op: ops.LinearScanOp, device) -> Kernel:
    def run(inputs, env, point):
        x, a = (torch.movedim(v, op.axis, 0) for v in inputs)
        steps = range(len(x) - 1, -1, -1) if op.reverse else range(len(x))
        out = torch.empty_like(x)
        carry = torch.zeros_like(x[0]) if len(x) else None
        for k in steps:
            carry = x[k] + a[k] * carry
            out[k] = carry
        return (torch.movedim(out, 0, op.axis),)

    return run


@kernel_for(ops.DiscountedSumOp)
def _discounted_sum(op: ops.DiscountedSumOp, device) -> Kernel:
    if op.ordered:
        return lambda inputs, env, point: (torch_ordered.ordered_discounted_sum(inputs[0], op.gamma, op.axis),)

    def run(inputs, env, point):
        x = torch.movedim(inputs[0], op.axis, 0)
        weights = torch.as_tensor(op.gamma ** np.arange(x.shape[0], dtype=np.float64), device=x.device)
        return (torch.tensordot(weights.to(x.dtype), x, dims=([0], [0])),)

    return run


@kernel_for(ops.ReshapeOp)
def _reshape(op: ops.ReshapeOp, device) -> Kernel:
    sizes = np_backend._sizes(op.shape)
    return lambda inputs, env, point: (torch.reshape(inputs[0], sizes(env)),)


@kernel_for(ops.ExpandOp)
def _expand(op: ops.ExpandOp, device) -> Kernel:
    sizes = np_backend._sizes(op.shape)
    return lambda inputs, env, point: (inputs[0].expand(sizes(env)),)


@kernel_for(ops.SpatialIndexOp)
def _spatial_index(op: ops.SpatialIndexOp, device) -> Kernel:
    index = compile_expr(seq(*op.items))
    return lambda inputs, env, point: (inputs[0][index(env)],)


@kernel_for(ops.PadOp)
def _pad(op: ops.PadOp, device) -> Kernel:
    before, after = compile_expr(op.before), compile_expr(op.after)

    def run(inputs, env, point):
        x = inputs[0]
        axis = op.axis % x.ndim
        parts = []
        for width in (int(before(env)), None, int(after(env))):
            if width is None:
                parts.append(x)
            elif width:
                parts.append(torch.zeros((*x.shape[:axis], width, *x.shape[axis + 1:]), dtype=x.dtype,
                                         device=x.device))
        return (torch.cat(parts, dim=axis) if len(parts) > 1 else x,)

    return run


@kernel_for(ops.UDFOp)
def _udf(op: ops.UDFOp, device) -> Kernel:
    def run(inputs, env, point):
        out = op.fn(*[x.detach().cpu().numpy() for x in inputs])
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return tuple(_tensor(v, device) for v in out)

    return run


@kernel_for(ops.AttentionOp)
def _attention(op: ops.AttentionOp, device) -> Kernel:
    """The NumPy reference's ops (:func:`.numpy_attention.reference`) in torch."""
    def run(inputs, env, point):
        q, k, v = _same_dtype(inputs)
        seen = torch.as_tensor(op.visible(q.shape[-2], k.shape[-2]), device=q.device)
        scores = torch.where(seen, torch.matmul(q, k.transpose(-1, -2)) * op.scale, -torch.inf)
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        return (torch.matmul(weights, v) / weights.sum(dim=-1, keepdim=True),)

    return run


def _batch_contract(a, b):
    m, n = a.shape[-2], b.shape[-1]
    rows = torch.swapaxes(a, -1, -2).reshape(-1, m)
    return rows.T @ b.reshape(-1, n)


def _cat(op, xs):
    return torch.cat(_same_dtype(xs), dim=op.axis)


def _squeeze(op, xs):
    return torch.squeeze(xs[0], dim=op.axis)


# Ops whose kernel is one torch call on the inputs and the op's static fields.
SIMPLE: dict[type, Callable] = {
    ops.CumSumOp: lambda op, xs: torch.cumsum(xs[0], dim=op.axis,
                                              dtype=torch.int64 if xs[0].dtype == torch.bool else None),
    ops.MatMulOp: lambda op, xs: (torch_ordered.ordered_matmul(*_same_dtype(xs), op.ordered_rows, op.ordered_inner)
                                  if op.ordered_rows or op.ordered_inner else torch.matmul(*_same_dtype(xs))),
    ops.BatchContractOp: lambda op, xs: (torch_ordered.ordered_batch_contract(*_same_dtype(xs), op.ordered)
                                         if op.ordered else _batch_contract(*_same_dtype(xs))),
    ops.PermuteOp: lambda op, xs: torch.permute(xs[0], op.axes),
    ops.SqueezeOp: _squeeze,
    ops.UnsqueezeOp: lambda op, xs: torch.unsqueeze(xs[0], op.axis),
    ops.CatOp: _cat,
    ops.CastOp: lambda op, xs: xs[0].to(DTYPES[op.dtype]),
    ops.IdentOp: lambda op, xs: xs[0],
    ops.ArgSortOp: lambda op, xs: torch.argsort(xs[0], dim=op.axis, stable=True),
    ops.TakeOp: lambda op, xs: (torch.take_along_dim(xs[0], along(op, xs[0], xs[1].to(torch.int64)), op.axis)
                                if op.batch else torch.index_select(xs[0], op.axis, xs[1].to(torch.int64))),
}


def _simple(op: ops.Op, device) -> Kernel:
    fn = SIMPLE[type(op)]
    return lambda inputs, env, point: (fn(op, inputs),)


for _op_type in SIMPLE:
    KERNELS[_op_type] = _simple


@kernel_for(ops.FusedOp)
def _fused(op: ops.FusedOp, device) -> Kernel:
    steps = [(_factory(step.op)(step.op, device), step.inputs, [DTYPES[d] for d in step.dtypes], step)
             for step in op.steps]
    outputs = op.outputs

    def run(inputs, env, point):
        values = []
        for kernel, links, dtypes, step in steps:
            args = [inputs[k] if j < 0 else values[j][k] for j, k in links]
            try:
                results = kernel(args, env, point)
            except Exception as err:
                raise StepFailed(step.op.name, step.site, err) from err
            values.append([v if v.dtype == d else v.to(d) for v, d in zip(results, dtypes)])
        return tuple(values[j][k] for j, k in outputs)

    return run


def _factory(op: ops.Op) -> Callable:
    factory = KERNELS.get(type(op))
    if factory is None:
        raise TempoError(f"the torch backend has no kernel for {op.name}")
    return factory


def _tensor(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    return torch.as_tensor(np.asarray(value), device=device)


class TorchBackend(Backend):
    """Eager PyTorch on ``device`` (``cpu`` by default; ``cuda`` or ``cuda:N`` when present)."""

    name = "torch"
    copies_constants = True

    def __init__(self, device: str | None = None):
        device = device or "cpu"
        try:
            self.device = torch.device(device)
        except RuntimeError as err:
            raise TempoError(f"torch backend: {device!r} is not a device ({err})") from None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise TempoError(f"torch backend: device {device!r} asked for, but torch sees no CUDA GPU here; "
                             f"use backend='torch' (the CPU) or a machine with a GPU")
        if self.device.type not in ("cpu", "cuda"):
            raise TempoError(f"torch backend: device {device!r} is not supported; use 'cpu' or 'cuda'")

    def kernel(self, op: ops.Op) -> Kernel:
        return _factory(op)(op, self.device)

    def covers(self, op_type: type) -> bool:
        return op_type in KERNELS

    def stack(self, tensors: list, shape: tuple, dtype: str):
        if not tensors:
            return torch.zeros(tuple(shape), dtype=DTYPES[dtype], device=self.device)
        out = torch.stack([self.cast(t, dtype) for t in tensors])
        return out.reshape(tuple(shape) + tuple(out.shape[1:]))

    def cast(self, tensor, dtype: str):
        if not isinstance(tensor, torch.Tensor):
            tensor = _tensor(tensor, self.device)
        want = DTYPES[dtype]
        return tensor if tensor.dtype == want else tensor.to(want)

    def broadcast(self, tensor, shape: tuple):
        return tensor.expand(tuple(shape))

    def to_numpy(self, tensor):
        if isinstance(tensor, torch.Tensor):
            return tensor.detach().cpu().numpy()
        return np.asarray(tensor)

    def empty(self, shape: tuple, dtype: str):
        return torch.empty(tuple(shape), dtype=DTYPES[dtype], device=self.device)

    def write_into(self, buffer, index, value):
        buffer[index].copy_(value)  # half the time of buffer[index] = value for a (512, 64) row
        return buffer

    def view(self, buffer, index):
        return buffer[index]

    def detach(self, tensor, sources: list):
        pointer = tensor.untyped_storage().data_ptr()
        if any(s.untyped_storage().data_ptr() == pointer for s in sources):
            return tensor.clone()
        return tensor

    def nbytes(self, tensor) -> int:
        return tensor.numel() * tensor.element_size()

    def owned_nbytes(self, tensor) -> int:
        return 0 if getattr(tensor, "_base", None) is not None else self.nbytes(tensor)
