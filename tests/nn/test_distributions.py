"""Normal.sample (no gradient) against rsample (reparameterised), and the learned log-std head, against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tempo as tpo

MEAN = np.array([0.3, -1.2, 2.0], dtype=np.float32)
WEIGHT = np.array([1.0, -0.5, 2.0], dtype=np.float32)


def reinforce(sampler: str, spelling: str):
    """The REINFORCE loss -mean(log_prob(a) * w * a) over T samples; its samples and the mean's gradient."""
    with tpo.Context(seed=1) as ctx:
        (t, T), = ctx.dims("t")
        mean = tpo.from_numpy(MEAN)
        std = tpo.from_numpy(np.float32(0.7)) if spelling == "rt" else 0.7
        dist = tpo.nn.Normal(mean + tpo.eval_symbol(t).cast("float32") * 0.0, std)
        a = getattr(dist, sampler)()
        score = dist.log_prob(a) * (tpo.from_numpy(WEIGHT) * a).detach()
        loss = -score[0:T].mean()
        loss.backward()
        return ctx.run({T: 50}, fetch=[a, mean.grad])


def torch_reinforce_grad(samples: np.ndarray) -> np.ndarray:
    mean = torch.tensor(MEAN, requires_grad=True)
    a = torch.tensor(samples)
    loss = -(torch.distributions.Normal(mean, 0.7).log_prob(a) * (torch.tensor(WEIGHT) * a)).mean()
    loss.backward()
    return mean.grad.numpy()


@pytest.mark.parametrize("spelling", ["float", "rt"])
def test_reinforce_on_sample_gives_the_score_function_gradient(spelling):
    samples, grad = reinforce("sample", spelling)
    expected = torch_reinforce_grad(samples)
    assert np.abs(expected).min() > 1e-3
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


def test_reinforce_on_rsample_also_differentiates_the_sample():
    samples, grad = reinforce("rsample", "float")
    mean = torch.tensor(MEAN, requires_grad=True)
    z = torch.tensor((samples - MEAN) / 0.7)
    a = mean + 0.7 * z
    dist = torch.distributions.Normal(mean, 0.7)
    (-(dist.log_prob(a) * (torch.tensor(WEIGHT) * a).detach()).mean()).backward()
    np.testing.assert_allclose(grad, mean.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert not np.allclose(grad, torch_reinforce_grad(samples), atol=1e-3)


def test_sample_and_rsample_draw_the_same_numbers():
    def draw(sampler):
        with tpo.Context(seed=4) as ctx:
            (t, T), = ctx.dims("t")
            dist = tpo.nn.Normal(tpo.from_numpy(MEAN) + tpo.eval_symbol(t).cast("float32") * 0.0, 0.5)
            return ctx.run({T: 3}, fetch=[getattr(dist, sampler)()])[0]

    np.testing.assert_array_equal(draw("sample"), draw("rsample"))


def test_rsample_gradient_of_mean_and_std_matches_torch():
    with tpo.Context(seed=2) as ctx:
        (t, T), = ctx.dims("t")
        mean, std = tpo.from_numpy(MEAN), tpo.from_numpy(np.array([0.5, 1.0, 2.0], np.float32))
        x = tpo.nn.Normal(mean + tpo.eval_symbol(t).cast("float32") * 0.0, std).rsample()
        loss = (x * x)[0:T].mean()
        loss.backward()
        xs, g_mean, g_std = ctx.run({T: 40}, fetch=[x, mean.grad, std.grad])
    m, s = torch.tensor(MEAN, requires_grad=True), torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
    z = torch.tensor((xs - MEAN) / np.array([0.5, 1.0, 2.0], np.float32))
    ((m + s * z) ** 2).mean(0).sum().div(3).backward()
    np.testing.assert_allclose(g_mean, m.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g_std, s.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_diag_gaussian_head_learns_its_log_std_like_torch():
    """One SGD step on a PPO-style loss: log_std's gradient and new value as torch computes them."""
    init = -0.5
    with tpo.Context(seed=3) as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        head = tpo.nn.DiagGaussianHead(3, dims=(i,), init_log_std=init)
        dist = head(tpo.from_numpy(MEAN) + tpo.eval_symbol(t).cast("float32") * 0.0)
        a = dist.sample()
        loss = -dist.log_prob(a).sum(axis=-1)[i, 0:T].mean() - 0.01 * dist.entropy().sum(axis=-1)
        loss.backward()
        tpo.optim.SGD(head.parameters(), lr=0.1).step()
        samples, log_std = ctx.run({I: 2, T: 30}, fetch=[a[i, 0:T], head.log_std])
    p = torch.full((3,), init, requires_grad=True)
    ref = torch.distributions.Normal(torch.tensor(MEAN), p.exp())
    (-(ref.log_prob(torch.tensor(samples[0])).sum(-1) + 0.01 * ref.entropy().sum(-1)).mean()).backward()
    np.testing.assert_allclose(log_std[0], np.full(3, init), rtol=0)
    np.testing.assert_allclose(log_std[1], init - 0.1 * p.grad.numpy(), rtol=1e-5)


def test_diag_gaussian_head_checks_its_sizes():
    with tpo.Context():
        with pytest.raises(tpo.TempoError, match="action_size must be a positive int, got None"):
            tpo.nn.DiagGaussianHead(None)
        head = tpo.nn.DiagGaussianHead(2)
        with pytest.raises(tpo.TempoError, match="last axis of 2, got shape \\(3,\\)"):
            head(tpo.from_numpy(MEAN))

