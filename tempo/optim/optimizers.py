"""Optimizers as recurrences over the iteration dim (TEMPO Fig. 8).

``step()`` defines, for every parameter ``p`` (a placeholder with
``p[0] = init``), the branch ``p[i + 1] = update(p[i], p.grad[i])``; optimizer
state (moments, step count) are placeholders of their own with ``s[0]`` and
``s[i + 1]`` branches. Learning rates may be numbers or RTs (e.g.
``1e-3 * 0.99 ** tpo.eval_symbol(i)``).
"""
from __future__ import annotations

from typing import Sequence

import tempo.api.functional as F
from tempo.api.data_parallel import mean_over_replicas
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import DomainError, TempoError, user_site


class Optimizer:
    """Base class: ``step()`` adds the update branch of every parameter."""

    def __init__(self, params: Sequence[RT], lr, max_grad_norm: float | None = None) -> None:
        self.params, self.lr, self.max_grad_norm = list(params), lr, max_grad_norm
        self.states: dict[str, RT] = {}  # name -> state placeholder (parameters and moments)
        self.next_states: dict[str, RT] = {}  # name -> its value for the next iteration
        self._resume_from = None  # a checkpoint given to resume() before step()
        self._when: RT | None = None  # step()'s gate
        site = user_site()
        if not self.params:
            raise TempoError("the optimizer got no parameters", site)
        for p in self.params:
            if p.node.id not in p.ctx.parameters:
                raise TempoError(f"{p!r} is not a parameter (make it with tpo.nn.parameter or a module)", site)
            if len(p.domain) != 1:
                raise DomainError(f"{p!r} has no iteration dim to update over; give its module dims=(i,)", site)

    def step(self, when: RT | None = None) -> None:
        """Define ``p[i + 1]`` for every parameter from its gradient at ``i``.

        Under ``tpo.data_parallel`` the gradient is the mean over the replicas.
        ``when``: a bool RT over the iteration dim; where it is false, the
        iteration leaves every parameter and optimizer state as it was (an
        update skipped, e.g. by PPO's target-KL early stop).
        """
        self._when = when
        grads = [p.grad for p in self.params]
        replica = self.params[0].ctx.replica
        if replica is not None:
            grads = mean_over_replicas(grads, replica)
        if self.max_grad_norm is not None:
            grads = clip_by_global_norm(grads, self.max_grad_norm)
        for k, (p, g) in enumerate(zip(self.params, grads)):
            self._prefix = f"{k}.{p.node.label or 'param'}"
            new = self._gated(p, self.update(p, g).cast(p.dtype))
            p[p.domain[0] + 1] = new
            self.states[self._prefix], self.next_states[self._prefix] = p, new
        if self._resume_from is not None:
            self._restart(self._resume_from)

    def _gated(self, old: RT, new: RT) -> RT:
        return new if self._when is None else F.where(self._when, new, old)

    def updated(self, p: RT) -> RT:
        """``p[i + 1]``: the parameter ``p`` after this iteration's update (call after :meth:`step`)."""
        for name, state in self.states.items():
            if state.node.id == p.node.id and "/" not in name:
                return self.next_states[name]
        raise TempoError(f"{p!r} is not updated by this optimizer (or step() was not called yet)", user_site())

    def state_dict(self) -> dict[str, RT]:
        """Every state's value for the next iteration, by name: what a checkpoint saves."""
        return dict(self.next_states)

    def resume(self, ckpt) -> None:
        """Start every state (parameters, moments) from a checkpoint of :meth:`state_dict`.

        It may come before or after :meth:`step`: called first, the states
        restart from the checkpoint as soon as ``step()`` defines them.
        """
        if self.states:
            self._restart(ckpt)
        else:
            self._resume_from = ckpt

    def _restart(self, ckpt) -> None:
        from tempo.api.rt import restart

        missing = [name for name in self.states if name not in ckpt.tensors]
        if missing:
            raise TempoError(f"the checkpoint has no tensor for {', '.join(missing)}", user_site())
        for name, state in self.states.items():
            restart(state, ckpt.tensors[name])

    def update(self, p: RT, g: RT) -> RT:
        raise NotImplementedError

    def state(self, p: RT, init: float = 0.0) -> RT:
        """A new state placeholder shaped like ``p``, starting at ``init``; define its ``[i + 1]``."""
        s = F.placeholder(p.shape, p.dtype, p.domain)
        s[0] = F.full(p.shape, init, p.dtype)
        s.ctx.roots.append(s.node.id)
        return s

    def define(self, name: str, s: RT, new: RT) -> None:
        """``s[i + 1] = new``, remembered under ``name`` for checkpoints."""
        new = self._gated(s, new)
        s[s.domain[0] + 1] = new
        self.states[f"{self._prefix}/{name}"], self.next_states[f"{self._prefix}/{name}"] = s, new


def clip_by_global_norm(grads: list[RT], max_norm: float) -> list[RT]:
    """Scale all gradients by ``min(1, max_norm / global_norm)``."""
    total = None
    for g in grads:
        sq = F.sum(g * g)
        total = sq if total is None else total + sq
    scale = F.minimum(1.0, max_norm / (F.sqrt(total) + 1e-6))
    return [g * scale for g in grads]


class SGD(Optimizer):
    """``p - lr * g``, with optional momentum."""

    def __init__(self, params, lr=1e-2, momentum: float = 0.0, max_grad_norm: float | None = None) -> None:
        super().__init__(params, lr, max_grad_norm)
        self.momentum = momentum

    def update(self, p: RT, g: RT) -> RT:
        if not self.momentum:
            return p - self.lr * g
        velocity = self.state(p)
        new = self.momentum * velocity + g
        self.define("velocity", velocity, new)
        return p - self.lr * new


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; ``weight_decay`` here is decoupled (AdamW)."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 max_grad_norm: float | None = None) -> None:
        super().__init__(params, lr, max_grad_norm)
        self.b1, self.b2 = betas
        self.eps, self.weight_decay = eps, weight_decay

    def update(self, p: RT, g: RT) -> RT:
        if self.weight_decay and not self.decoupled:
            g = g + self.weight_decay * p
        m, v, count = self.state(p), self.state(p), self.state(F.sum(p))
        m_new = self.b1 * m + (1.0 - self.b1) * g
        v_new = self.b2 * v + (1.0 - self.b2) * g * g
        k = count + 1.0
        self.define("m", m, m_new)
        self.define("v", v, v_new)
        self.define("step", count, k)
        m_hat = m_new / (1.0 - self.b1 ** k)
        v_hat = v_new / (1.0 - self.b2 ** k)
        step = m_hat / (F.sqrt(v_hat) + self.eps)
        if self.weight_decay and self.decoupled:
            step = step + self.weight_decay * p
        return p - self.lr * step


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter)."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 max_grad_norm: float | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, max_grad_norm)
