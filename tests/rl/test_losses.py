"""tpo.rl.ppo_clip_loss: several Adam updates on one batch match the same PPO written in torch."""
from __future__ import annotations

import numpy as np
import torch

import tempo as tpo

RNG = np.random.default_rng(0)
B, T, OBS, ACTIONS, UPDATES, LR, CLIP = 3, 5, 4, 3, 5, 0.2, 0.2
OBS_DATA = RNG.normal(size=(B, T, OBS)).astype(np.float32)
ACT = RNG.integers(0, ACTIONS, size=(B, T))
LOGP_OLD = np.log(RNG.dirichlet(np.ones(ACTIONS), size=(B, T))[np.arange(B)[:, None], np.arange(T), ACT]
                  ).astype(np.float32)
ADV = RNG.normal(size=(B, T)).astype(np.float32)
RET = RNG.normal(size=(B, T)).astype(np.float32)
MASK = (np.arange(T)[None, :] < np.array([[5], [3], [4]])).astype(np.float32)  # episodes end early


def tempo_run():
    with tpo.Context(seed=1) as ctx:
        (i, I), = ctx.dims("i")
        actor, critic = tpo.nn.Linear(OBS, ACTIONS, dims=(i,)), tpo.nn.Linear(OBS, 1, dims=(i,))
        obs = tpo.from_numpy(OBS_DATA)
        dist = tpo.nn.Categorical(logits=actor(obs))
        loss = tpo.rl.ppo_clip_loss(dist.log_prob(tpo.from_numpy(ACT)), tpo.from_numpy(LOGP_OLD),
                                    tpo.from_numpy(ADV), critic(obs).squeeze(-1), tpo.from_numpy(RET),
                                    dist.entropy(), tpo.from_numpy(MASK), CLIP, 0.5, 0.01)
        loss.backward()
        tpo.optim.Adam(actor.parameters() + critic.parameters(), lr=LR).step()
        return ctx.run({I: UPDATES}, fetch=[loss, actor.weight])


def initial_parameters() -> list[torch.Tensor]:
    with tpo.Context(seed=1):
        layers = tpo.nn.Linear(OBS, ACTIONS), tpo.nn.Linear(OBS, 1)
    return [torch.tensor(p.node.op.value.array, requires_grad=True)
            for layer in layers for p in (layer.weight, layer.bias)]


def torch_run():
    params = initial_parameters()
    wa, ba, wc, bc = params
    opt = torch.optim.Adam(params, lr=LR)
    obs, mask = torch.tensor(OBS_DATA), torch.tensor(MASK)
    losses, weights, clipped = [], [], []
    for _ in range(UPDATES):
        weights.append(wa.detach().numpy().copy())
        dist = torch.distributions.Categorical(logits=obs @ wa + ba)
        adv = torch.tensor(ADV)
        mean = (adv * mask).sum() / mask.sum()
        adv = (adv - mean) / ((((adv - mean) ** 2) * mask).sum() / mask.sum()).sqrt().add(1e-8)
        ratio = (dist.log_prob(torch.tensor(ACT)) - torch.tensor(LOGP_OLD)).exp()
        surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(1 - CLIP, 1 + CLIP))
        value = (obs @ wc + bc).squeeze(-1)
        per_step = surrogate + 0.5 * (value - torch.tensor(RET)) ** 2 - 0.01 * dist.entropy()
        loss = (per_step * mask).sum() / mask.sum()
        clipped.append(((ratio - ratio.clamp(1 - CLIP, 1 + CLIP)).abs() > 0).float()[mask > 0].mean().item())
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return np.array(losses), np.array(weights), clipped


def test_ppo_updates_match_torch_with_the_clip_active():
    losses, weights = tempo_run()
    ref_losses, ref_weights, clipped = torch_run()
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-4, atol=1e-5)
    assert max(clipped) > 0.2  # later updates move the ratio outside the clip range on many steps
