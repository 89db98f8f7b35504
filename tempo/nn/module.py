"""Parameters and modules.

A parameter is state that the optimizer updates once per iteration. Following
TEMPO Fig. 8 it is not a mutable variable but a MergeOp cycle over the
iteration dim: ``p[0] = init`` here, ``p[i + 1] = update(p[i], p.grad[i])``
added by an optimizer's ``step()``. Parameters are leaves for autodiff, so no
gradient flows through an update into earlier iterations.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence

import numpy as np

import tempo.api.functional as F
from tempo.api.context import current
from tempo.api.rt import RecurrentTensor
from tempo.errors import DomainError, user_site
from tempo.symbolic.expr import Expr


def parameter(init: np.ndarray, dims: Sequence[Expr] = (), name: str = "") -> RecurrentTensor:
    """A trainable tensor starting at ``init`` and varying over at most one (iteration) dim."""
    ctx, site = current(), user_site()
    dims = tuple(dims)
    if len(dims) > 1:
        raise DomainError(f"a parameter varies over at most one (iteration) dim, not "
                          f"{', '.join(d.name for d in dims)}", site)
    init = np.asarray(init)
    if not dims:
        p = F.from_numpy(init)
    else:
        p = F.placeholder(init.shape, str(init.dtype), dims)
        p[0] = F.from_numpy(init)
    ctx.parameters.add(p.node.id)
    ctx.roots.append(p.node.id)
    if name:
        ctx.sdg.nodes[p.node.id] = replace(ctx.sdg.nodes[p.node.id], label=name)
        p = RecurrentTensor(ctx, ctx.sdg.nodes[p.node.id])
    return p


def init_rng(*path: int) -> np.random.Generator:
    """The generator for one module's initial values: a function of the context seed and ``path``."""
    return np.random.default_rng((current().seed, *path))


class Module:
    """Base class: a module's parameters are its parameter attributes and those of its submodules."""

    def __init__(self, dims: Sequence[Expr] = ()) -> None:
        self.dims = tuple(dims)
        self.rng = init_rng(current().new_stream())

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, RecurrentTensor]]:
        """``(dotted name, parameter)`` pairs, in attribute order."""
        for name, value in vars(self).items():
            if isinstance(value, RecurrentTensor) and value.node.id in value.ctx.parameters:
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value.named_parameters(f"{prefix}{name}.")
            elif isinstance(value, (list, tuple)):
                for k, item in enumerate(value):
                    if isinstance(item, Module):
                        yield from item.named_parameters(f"{prefix}{name}.{k}.")

    def parameters(self) -> list[RecurrentTensor]:
        return [p for _, p in self.named_parameters()]

    def param(self, name: str, init: np.ndarray) -> RecurrentTensor:
        return parameter(init.astype(np.float32), self.dims, name=f"{type(self).__name__}.{name}")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError
