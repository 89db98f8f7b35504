"""tpo.optim: parameter recurrences over the iteration dim, checked against torch.optim."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tempo as tpo

RNG = np.random.default_rng(0)
X = RNG.normal(size=(16, 3)).astype(np.float32)
Y = (X @ np.array([1.0, -2.0, 0.5]) + 0.3).astype(np.float32)
ITERS = 12


def tempo_losses(make_optimizer, lr_decay: float | None = None):
    with tpo.Context(seed=0) as ctx:
        (i, I), = ctx.dims("i")
        model = tpo.nn.Linear(3, 1, dims=(i,))
        pred = model(tpo.from_numpy(X)).squeeze(1)
        loss = ((pred - tpo.from_numpy(Y)) ** 2.0).mean()
        loss.backward()
        lr = 0.1 if lr_decay is None else 0.1 * lr_decay ** tpo.eval_symbol(i).cast("float32")
        make_optimizer(model.parameters(), lr).step()
        losses, weight = ctx.run({I: ITERS}, fetch=[loss, model.weight])
    return losses, weight


def torch_losses(make_optimizer, lr_decay: float | None = None, clip: float | None = None):
    with tpo.Context(seed=0):
        model = tpo.nn.Linear(3, 1)
    w, b = (torch.tensor(p.node.op.value.array, requires_grad=True) for p in (model.weight, model.bias))
    opt = make_optimizer([w, b], 0.1)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, lr_decay) if lr_decay else None
    out, used = [], []
    for _ in range(ITERS):
        used.append(w.detach().numpy().copy())
        loss = ((torch.tensor(X) @ w).squeeze(1) + b - torch.tensor(Y)).pow(2).mean()
        out.append(loss.item())
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_([w, b], clip)
        opt.step()
        if sched:
            sched.step()
    return np.array(out), np.array(used)


CASES = {
    "sgd": (lambda ps, lr: tpo.optim.SGD(ps, lr), lambda ps, lr: torch.optim.SGD(ps, lr)),
    "sgd_momentum": (lambda ps, lr: tpo.optim.SGD(ps, lr, momentum=0.9),
                     lambda ps, lr: torch.optim.SGD(ps, lr, momentum=0.9)),
    "adam": (lambda ps, lr: tpo.optim.Adam(ps, lr), lambda ps, lr: torch.optim.Adam(ps, lr)),
    "adam_l2": (lambda ps, lr: tpo.optim.Adam(ps, lr, weight_decay=0.1),
                lambda ps, lr: torch.optim.Adam(ps, lr, weight_decay=0.1)),
    "adamw": (lambda ps, lr: tpo.optim.AdamW(ps, lr, weight_decay=0.1),
              lambda ps, lr: torch.optim.AdamW(ps, lr, weight_decay=0.1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_torch(name):
    mine, theirs = CASES[name]
    losses, weight = tempo_losses(mine)
    ref_losses, ref_weight = torch_losses(theirs)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weight, ref_weight, rtol=1e-4, atol=1e-5)  # the weights each iteration used
    assert losses[-1] < losses[0]


def test_learning_rate_may_be_a_recurrent_tensor():
    losses, _ = tempo_losses(lambda ps, lr: tpo.optim.Adam(ps, lr), lr_decay=0.8)
    ref, _ = torch_losses(lambda ps, lr: torch.optim.Adam(ps, lr), lr_decay=0.8)
    np.testing.assert_allclose(losses, ref, rtol=1e-4, atol=1e-5)


def test_gradient_clipping_by_global_norm_matches_torch():
    losses, _ = tempo_losses(lambda ps, lr: tpo.optim.SGD(ps, lr, max_grad_norm=0.5))
    ref, _ = torch_losses(lambda ps, lr: torch.optim.SGD(ps, lr), clip=0.5)
    np.testing.assert_allclose(losses, ref, rtol=1e-4, atol=1e-5)


def test_parameters_are_leaves_each_iteration():
    """The gradient at iteration i is that of loss(p[i]), not of the whole update chain."""
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        w = tpo.nn.parameter(np.array(2.0, np.float32), dims=(i,))
        loss = w * w
        loss.backward()
        tpo.optim.SGD([w], 0.25).step()
        ws, grads = ctx.run({I: 4}, fetch=[w, w.grad])
    np.testing.assert_allclose(ws, [2.0, 1.0, 0.5, 0.25])
    np.testing.assert_allclose(grads, 2 * ws)


def test_a_parameter_used_outside_its_dims_is_an_error():
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        w = tpo.nn.parameter(np.ones(2, np.float32), dims=(i,))
        loss = (w[tpo.max(i - 1, 0)] * w).sum()
        with pytest.raises(tpo.DomainError, match=r"parameter .* is read here at \[max\(0, i - 1\)\]") as info:
            loss.backward()
    assert "loss = (w[tpo.max(i - 1, 0)] * w).sum()" in str(info.value)


def test_optimizer_needs_an_iteration_dim():
    with tpo.Context():
        w = tpo.nn.parameter(np.ones(2, np.float32))
        (w * w).sum().backward()
        with pytest.raises(tpo.DomainError, match="no iteration dim"):
            tpo.optim.SGD([w], 0.1)
