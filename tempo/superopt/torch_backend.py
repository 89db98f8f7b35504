"""PyTorch kernels for every op, keyed by op name, and the graph runner built on them."""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from tempo.superopt.graph import Graph, run_plan
from tempo.superopt.reference import ARITHMETIC

ACT = {"none": lambda x: x, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}


def _conv2d(a, x, w, b=None):
    return ACT[a["act"]](F.conv2d(x, w, b, stride=a["stride"], padding=a["pad"], groups=a["groups"]))


def _matmul(a, x, w, b=None):
    if b is not None and x.dim() == 2 and w.dim() == 2:
        return ACT[a["act"]](torch.addmm(b, x, w))
    out = torch.matmul(x, w)
    return ACT[a["act"]](out + b if b is not None else out)


def _bn_scale(a, s, v):
    return s / torch.sqrt(v + a["eps"])


def _batchnorm(a, x, s, b, m, v):
    return F.batch_norm(x, m, v, s, b, training=False, eps=a["eps"])


def _enlarge(a, w):
    ph, pw = (a["size"] - w.shape[2]) // 2, (a["size"] - w.shape[3]) // 2
    return F.pad(w, (pw, pw, ph, ph))


KERNELS: dict[str, Callable] = {
    "relu": lambda a, x: torch.relu(x),
    "sigmoid": lambda a, x: torch.sigmoid(x),
    "tanh": lambda a, x: torch.tanh(x),
    "gelu": lambda a, x: F.gelu(x),
    "exp": lambda a, x: torch.exp(x),
    "sqrt": lambda a, x: torch.sqrt(x),
    **ARITHMETIC,
    "conv2d": _conv2d,
    "matmul": _matmul,
    "maxpool": lambda a, x: F.max_pool2d(x, a["kernel"], a["stride"], a["pad"]),
    "avgpool": lambda a, x: F.avg_pool2d(x, a["kernel"], a["stride"], a["pad"],
                                         count_include_pad=True),
    "batchnorm": _batchnorm,
    "bn_scale": _bn_scale,
    "bn_shift": lambda a, s, b, m, v: b - m * _bn_scale(a, s, v),
    "layernorm": lambda a, x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, a["eps"]),
    "softmax": lambda a, x: torch.softmax(x, a["axis"]),
    "enlarge": _enlarge,
    "concat": lambda a, *xs: torch.cat(xs, a["axis"]),
    "slice": lambda a, x: x.narrow(a["axis"], a["start"], a["end"] - a["start"]),
    "reshape": lambda a, x: x.reshape(a["shape"]),
    "transpose": lambda a, x: x.permute(a["perm"]),
}


def compile_graph(graph: Graph, device: str = "cpu") -> Callable[[Mapping[str, np.ndarray]], list]:
    """A function from input arrays to output tensors that runs ``graph`` with torch on ``device``.

    The steps are prepared once (kernel, attributes and argument slots per node,
    weights already on the device); a call copies the inputs to the device,
    dispatches the kernels and, on a GPU, waits for them to finish, so a timed
    call is the end-to-end latency from host inputs to computed outputs.
    Weights and inputs are copied into memory torch allocates (64-byte aligned)
    on the CPU too: matmuls ran 2-14% slower on weights 4-32 bytes off a
    64-byte boundary (measured at commit b5010af by the script
    ``git show b5010af:benchmarks/superopt_alignment.py`` prints; NumPy aligns to 16), so without the copy a graph's speed
    would depend on where NumPy had happened to place its arrays. On a
    GPU, TF32 is switched off (for the whole process): float32 is computed as
    the reference backend computes it.
    """
    dev = torch.device(device)
    on_gpu = dev.type == "cuda"
    if on_gpu:                    # float32 as the reference computes it: no TF32 matmuls or convs
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    plan = run_plan(graph, KERNELS, lambda array: torch.tensor(array, device=dev))

    def run(feeds: Mapping[str, np.ndarray]) -> list:
        values = list(plan.values)
        for index, name in plan.inputs:
            values[index] = torch.tensor(feeds[name], device=dev)
        with torch.inference_mode():
            for kernel, attrs, args, out in plan.steps:
                values[out] = kernel(attrs, *(values[i] for i in args))
        if on_gpu:
            torch.cuda.synchronize()
        return [values[i] for i in plan.outputs]

    return run
