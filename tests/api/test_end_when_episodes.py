"""One episode per iteration, ended by ``tpo.end_when``: episodic REINFORCE's shape.

Iteration ``i`` acts with the policy's parameters ``w[i]`` until its episode ends,
``T[i]`` being that episode's length; the learner reads the episode's ``T[i]``
steps (returns, a baseline over them, the policy gradient) and SGD gives
``w[i + 1]``, so each episode's length depends on what the ones before it
taught. Drawn by hypothesis, the program is checked against a NumPy loop that
breaks where the episode ends, and its loops over ``t`` run exactly the
episodes' steps.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo

STEP, EDGE = 0.25, 1.0  # an action moves the walker by STEP; the episode ends past +-EDGE


def episodes(x0, noise, drift, w0, lr: float, gamma: float):
    """The program: a walker pushed left or right by a logistic policy, one episode per iteration."""
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        wa = tpo.nn.parameter(np.array(w0[0]), dims=(i,))
        wb = tpo.nn.parameter(np.array(w0[1]), dims=(i,))
        o = tpo.placeholder((), "float64", dims=(i, t))
        o[i, 0] = tpo.from_numpy(x0, dims=(i,))
        p = (wa * o + wb).sigmoid()                                   # P(push right)
        a = (tpo.from_numpy(noise, dims=(i, t)) < p).cast("float64")  # sampled by inverse CDF
        after = o + STEP * (2.0 * a - 1.0) + tpo.from_numpy(drift, dims=(i, t))
        o[i, t + 1] = after
        r = 1.0 - 0.5 * after.abs()
        tpo.end_when(after.abs() > EDGE)                              # T[i]: the episode's length
        g = r[i, t:T].discounted_sum(gamma)
        baseline = g[i, 0:T].mean()
        spread = ((g[i, 0:T] - baseline) ** 2.0).mean().sqrt() + 1e-6
        advantage = ((g - baseline) / spread).detach()
        log_p = a * p.log() + (1.0 - a) * (1.0 - p).log()
        loss = -(log_p * advantage)[i, 0:T].mean()
        loss.backward()
        tpo.optim.SGD([wa, wb], lr=lr).step()
        program = ctx.compile(fetch=[wa, wb, g, r[i, 0:T].sum()])
    return program


def reference(x0, noise, drift, w0, lr: float, gamma: float):
    """The NumPy loop: each episode breaks at the step that takes the walker past the edge."""
    iterations, cap = noise.shape
    wa, wb = np.zeros(iterations), np.zeros(iterations)
    g_all, totals, lengths = np.full(noise.shape, np.nan), np.zeros(iterations), np.zeros(iterations, int)
    a_, b_ = w0
    for i in range(iterations):
        wa[i], wb[i] = a_, b_
        o, obs, acts, probs, rewards = x0[i], [], [], [], []
        for t in range(cap):
            p = 1.0 / (1.0 + np.exp(-(a_ * o + b_)))
            act = float(noise[i, t] < p)
            after = o + STEP * (2.0 * act - 1.0) + drift[i, t]
            obs.append(o), acts.append(act), probs.append(p), rewards.append(1.0 - 0.5 * abs(after))
            o = after
            if abs(after) > EDGE:
                break
        n, rewards = len(rewards), np.array(rewards)
        g = np.array([sum(gamma ** k * x for k, x in enumerate(rewards[s:])) for s in range(n)])
        advantage = (g - g.mean()) / (g.std() + 1e-6)
        score = advantage * (np.array(acts) - np.array(probs))        # d log p / d logit, times the advantage
        a_, b_ = a_ + lr * (score * np.array(obs)).mean(), b_ + lr * score.mean()
        lengths[i], g_all[i, :n], totals[i] = n, g, rewards.sum()
    return lengths, [wa, wb, g_all, totals]


drawn = st.tuples(st.integers(1, 6), st.integers(2, 24), st.integers(0, 2 ** 16),
                  st.floats(0.1, 2.0), st.floats(0.5, 0.99))


@settings(deadline=None, max_examples=10)
@given(drawn)
def test_episodes_match_a_numpy_loop_that_breaks_where_each_ends_and_compute_only_their_steps(case):
    iterations, cap, seed, lr, gamma = case
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-0.5, 0.5, iterations)
    noise, drift = rng.uniform(0.0, 1.0, (iterations, cap)), rng.normal(0.0, 0.1, (iterations, cap))
    w0 = tuple(rng.normal(0.0, 1.0, 2))
    program = episodes(x0, noise, drift, w0, lr, gamma)
    out = program.run({"I": iterations, "T": cap})
    lengths, expected = reference(x0, noise, drift, w0, lr, gamma)
    np.testing.assert_array_equal(program.lengths["T"], lengths)
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True)
    assert program.end_checks["T"].steps == lengths.sum()  # computed steps == the episodes' steps
