"""examples/ppo_continuous.py's update against CleanRL's ``ppo_continuous_action.py`` update replayed in torch.

Tempo runs the example's learning half (orthogonally initialised MLPs, a
``DiagGaussianHead``, ``ppo_minibatch_loss``, Adam with a global grad-norm
clip and an annealed learning rate, the ``Minibatches`` schedule) on two fixed
synthetic rollouts. Torch replays CleanRL's update loop from Tempo's initial
weights with Tempo's minibatch orders, and the weights must agree after every
update. The rollouts are drawn so that every branch the update has is taken:
ratios inside and outside the clip range, clipped and unclipped value errors,
and gradients above and below ``max_grad_norm``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

import tempo as tpo
import tempo.rl
from tempo.rl.minibatch import Minibatches, flatten

NUM_ENVS, NUM_STEPS, EPOCHS, MINIBATCHES, ROLLOUTS = 2, 8, 2, 2, 2
N_OBS, N_ACT, HIDDEN = 3, 2, [8, 8]
LR, CLIP, VF_COEF, ENT_COEF, MAX_GRAD_NORM = 0.01, 0.2, 0.5, 0.0, 0.5
K = EPOCHS * MINIBATCHES  # updates per rollout
UPDATES = ROLLOUTS * K
BATCH = NUM_ENVS * NUM_STEPS
MODULES = ("critic", "actor", "head")


def synthetic_rollouts(seed: int = 0) -> dict[str, np.ndarray]:
    """What each rollout stored, per (rollout, env, step): the columns of the example's minibatch table.

    Actions come from a policy near the initial one (mean 0, std 1) and the old
    log-probabilities are theirs under it, jittered so the first ratios already
    spread across the clip range; returns and old values are independent draws
    on the scale of the initial critic's outputs.
    """
    rng = np.random.default_rng(seed)
    shape = (ROLLOUTS, NUM_ENVS, NUM_STEPS)
    act = rng.normal(size=(*shape, N_ACT))
    logp = (-0.5 * act ** 2 - 0.5 * np.log(2 * np.pi)).sum(-1) + rng.normal(scale=0.3, size=shape)
    returns = rng.normal(scale=0.5, size=shape)
    columns = {"obs": rng.normal(size=(*shape, N_OBS)), "act": act, "logp": logp,
               "adv": rng.normal(size=shape), "ret": returns, "value": rng.normal(scale=0.5, size=shape)}
    return {name: x.astype(np.float32) for name, x in columns.items()}


def tempo_updates(rollouts: dict[str, np.ndarray]):
    """The example's update on ``rollouts``: each update's minibatch order, the weights before it and after it."""
    with tpo.Context(seed=1) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        batches = Minibatches(i, BATCH, EPOCHS, MINIBATCHES)
        critic = tpo.nn.MLP(N_OBS, HIDDEN, 1, dims=(i,), init="orthogonal", last_init_scale=1.0)
        actor = tpo.nn.MLP(N_OBS, HIDDEN, N_ACT, dims=(i,), init="orthogonal", last_init_scale=0.01)
        head = tpo.nn.DiagGaussianHead(N_ACT, dims=(i,))

        def column(x):  # the rollout taken at update i, over (b, i, t), as (NUM_ENVS * NUM_STEPS, size)
            by_update = np.full((UPDATES, *x.shape[1:]), np.nan, np.float32)  # no rollout between rollouts
            by_update[::K] = x
            rt = tpo.from_numpy(by_update.swapaxes(0, 1), dims=(b, i, t))
            return flatten(rt if rt.shape else rt.unsqueeze(0), NUM_ENVS, NUM_STEPS)

        names = ("obs", "act", "logp", "adv", "ret", "value")
        table = tpo.cat([column(rollouts[name]) for name in names], axis=1)
        rows = batches.select(table)
        mb_obs, mb_act = rows.spatial[:, 0:N_OBS], rows.spatial[:, N_OBS:N_OBS + N_ACT]
        mb = [rows.spatial[:, N_OBS + N_ACT + k] for k in range(4)]
        new = head(actor(mb_obs))
        stats = tempo.rl.ppo_minibatch_loss(new.log_prob(mb_act).sum(-1), mb[0], mb[1],
                                            critic(mb_obs).squeeze(-1), mb[3], mb[2], new.entropy().sum(-1),
                                            CLIP, True, ENT_COEF, VF_COEF, True)
        stats.loss.backward()
        lr = LR * (1.0 - tpo.eval_symbol(i // K).cast("float32") / float(ROLLOUTS))
        adam = tpo.optim.Adam(critic.parameters() + actor.parameters() + head.parameters(), lr=lr, eps=1e-5,
                              max_grad_norm=MAX_GRAD_NORM)
        adam.step()

        named = [(f"{part}.{name}", p) for part, module in zip(MODULES, (critic, actor, head))
                 for name, p in module.named_parameters()]
        fetch = [batches.order()] + [p for _, p in named] + [adam.updated(p) for _, p in named]
        order, *weights = ctx.run({B: NUM_ENVS, I: UPDATES, T: NUM_STEPS}, fetch=fetch)
    names = [name for name, _ in named]
    return order, dict(zip(names, weights[:len(names)])), dict(zip(names, weights[len(names):]))


class Agent(nn.Module):
    """CleanRL's continuous-action agent: critic, actor mean and a state-independent ``actor_logstd``."""

    def __init__(self) -> None:
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(N_OBS, HIDDEN[0]), nn.Tanh(), nn.Linear(HIDDEN[0], HIDDEN[1]),
                                    nn.Tanh(), nn.Linear(HIDDEN[1], 1))
        self.actor_mean = nn.Sequential(nn.Linear(N_OBS, HIDDEN[0]), nn.Tanh(), nn.Linear(HIDDEN[0], HIDDEN[1]),
                                        nn.Tanh(), nn.Linear(HIDDEN[1], N_ACT))
        self.actor_logstd = nn.Parameter(torch.zeros(1, N_ACT))

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor):
        action_mean = self.actor_mean(x)
        std = self.actor_logstd.expand_as(action_mean).exp()
        probs = torch.distributions.Normal(action_mean, std)
        return probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Tempo's weights (``x @ weight``, weight shaped (in, out)) into torch's ``nn.Linear`` (out, in)."""
        with torch.no_grad():
            for part, seq in (("critic", self.critic), ("actor", self.actor_mean)):
                for k, linear in enumerate(seq[::2]):
                    linear.weight.copy_(torch.from_numpy(weights[f"{part}.layers.{k}.weight"].T))
                    linear.bias.copy_(torch.from_numpy(weights[f"{part}.layers.{k}.bias"]))
            self.actor_logstd.copy_(torch.from_numpy(weights["head.log_std"]).reshape(1, N_ACT))

    def weights(self) -> dict[str, np.ndarray]:
        """The weights by Tempo's names and layouts."""
        out = {"head.log_std": self.actor_logstd.detach().numpy().reshape(N_ACT).copy()}
        for part, seq in (("critic", self.critic), ("actor", self.actor_mean)):
            for k, linear in enumerate(seq[::2]):
                out[f"{part}.layers.{k}.weight"] = linear.weight.detach().numpy().T.copy()
                out[f"{part}.layers.{k}.bias"] = linear.bias.detach().numpy().copy()
        return out


def cleanrl_updates(rollouts: dict[str, np.ndarray], initial: dict[str, np.ndarray], orders: np.ndarray):
    """CleanRL's update loop in torch, from ``initial`` weights, with minibatch ``orders`` instead of
    ``np.random.shuffle``: the weights after each update and what each update's loss did."""
    agent = Agent()
    agent.load(initial)
    optimizer = torch.optim.Adam(agent.parameters(), lr=LR, eps=1e-5)
    after, branches = [], {"ratio_clipped": [], "value_clipped": [], "grad_norm": []}
    for iteration in range(1, ROLLOUTS + 1):
        optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / ROLLOUTS) * LR
        b = {name: torch.from_numpy(x[iteration - 1].reshape(BATCH, *x.shape[3:])) for name, x in rollouts.items()}
        for epoch in range(EPOCHS):
            for m in range(MINIBATCHES):
                mb_inds = torch.from_numpy(orders[(iteration - 1) * K + epoch * MINIBATCHES + m])
                newlogprob, entropy, newvalue = agent.get_action_and_value(b["obs"][mb_inds], b["act"][mb_inds])
                logratio = newlogprob - b["logp"][mb_inds]
                ratio = logratio.exp()
                mb_advantages = b["adv"][mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - CLIP, 1 + CLIP)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                newvalue = newvalue.view(-1)
                v_loss_unclipped = (newvalue - b["ret"][mb_inds]) ** 2
                v_clipped = b["value"][mb_inds] + torch.clamp(newvalue - b["value"][mb_inds], -CLIP, CLIP)
                v_loss_clipped = (v_clipped - b["ret"][mb_inds]) ** 2
                v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                loss = pg_loss - ENT_COEF * entropy.mean() + v_loss * VF_COEF
                optimizer.zero_grad()
                loss.backward()
                branches["grad_norm"].append(nn.utils.clip_grad_norm_(agent.parameters(), MAX_GRAD_NORM).item())
                optimizer.step()
                after.append(agent.weights())
                branches["ratio_clipped"].append((pg_loss2 > pg_loss1).float().mean().item())
                branches["value_clipped"].append((v_loss_clipped > v_loss_unclipped).float().mean().item())
    return after, {name: np.array(x) for name, x in branches.items()}


def test_ppo_continuous_updates_match_cleanrl_in_torch():
    rollouts = synthetic_rollouts()
    orders, before, after = tempo_updates(rollouts)
    assert orders.shape == (UPDATES, BATCH // MINIBATCHES)
    for epoch in orders.reshape(ROLLOUTS * EPOCHS, BATCH):  # each epoch a permutation of the rollout
        assert sorted(epoch.tolist()) == list(range(BATCH))
    for name in before:  # what an update leaves is what the next one starts from
        np.testing.assert_array_equal(before[name][1:], after[name][:-1])

    initial = {name: w[0] for name, w in before.items()}
    reference, branches = cleanrl_updates(rollouts, initial, orders)
    for u, want in enumerate(reference):
        for name, w in want.items():
            # Tempo's Adam rounds its bias corrections to float32 (1 - 0.999 is off by 1.3e-5), torch keeps them in
            # float64: a step may differ by up to 1e-5 of its size, so near zero the error is measured
            # against how far the tensor has moved.
            moved = np.abs(w - initial[name]).max()
            np.testing.assert_allclose(after[name][u], w, rtol=1e-5, atol=1e-4 * moved,
                                       err_msg=f"{name} after update {u}")
    assert 0.0 < branches["ratio_clipped"].min() and branches["ratio_clipped"].max() < 1.0
    assert 0.0 < branches["value_clipped"].min() and branches["value_clipped"].max() < 1.0
    norms = branches["grad_norm"]
    assert norms.max() > MAX_GRAD_NORM > norms.min(), norms
    moved = {name: np.abs(after[name][-1] - before[name][0]).max() for name in before}
    assert min(moved.values()) > LR, moved  # every parameter, the log std included, trains
