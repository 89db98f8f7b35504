"""tpo.nn: layers against torch on the same weights, deterministic initialisation, distributions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tempo as tpo

X = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)


def weights(p) -> torch.Tensor:
    return torch.tensor(p.node.op.value.array if not p.domain else _initial(p))


def _initial(p):
    edge = p.ctx.sdg.in_edges(p.node.id)[0]
    return p.ctx.sdg.nodes[edge.src].op.value.array


def run(*rts):
    return rts[0].ctx.run({}, fetch=list(rts))


def test_linear_and_mlp_match_torch():
    with tpo.Context(seed=3):
        mlp = tpo.nn.MLP(6, [5, 7], 2, activation="relu")
        out, = run(mlp(tpo.from_numpy(X)))
    h = torch.tensor(X)
    for k, layer in enumerate(mlp.layers):
        h = h @ weights(layer.weight) + weights(layer.bias)
        h = torch.relu(h) if k < len(mlp.layers) - 1 else h
    np.testing.assert_allclose(out, h.numpy(), rtol=1e-5, atol=1e-6)
    assert [n for n, _ in mlp.named_parameters()] == [f"layers.{k}.{w}" for k in range(3) for w in ("weight", "bias")]


@pytest.mark.parametrize("norm", ["LayerNorm", "RMSNorm"])
def test_norms_match_torch(norm):
    with tpo.Context():
        layer = getattr(tpo.nn, norm)(6)
        out, = run(layer(tpo.from_numpy(X)))
    ref = torch.nn.LayerNorm(6) if norm == "LayerNorm" else torch.nn.RMSNorm(6, eps=1e-6)
    np.testing.assert_allclose(out, ref(torch.tensor(X)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_embedding_looks_up_rows():
    with tpo.Context():
        emb = tpo.nn.Embedding(5, 3)
        out, = run(emb(tpo.from_numpy(np.array([4, 0, 4]))))
    np.testing.assert_allclose(out, weights(emb.weight).numpy()[[4, 0, 4]])


def test_initialisation_is_deterministic_in_the_seed():
    def init(seed):
        with tpo.Context(seed=seed):
            return weights(tpo.nn.Linear(3, 2).weight).numpy()

    np.testing.assert_array_equal(init(0), init(0))
    assert not np.allclose(init(0), init(1))


def test_categorical_matches_torch_and_samples_its_probabilities():
    logits = np.log(np.array([0.1, 0.6, 0.3], dtype=np.float32))
    with tpo.Context(seed=0) as ctx:
        (t, T), = ctx.dims("t")
        dist = tpo.nn.Categorical(tpo.from_numpy(logits) + tpo.zeros((3,)) * tpo.eval_symbol(t).cast("float32"))
        a = dist.sample()
        samples, log_prob, entropy = ctx.run({T: 3000}, fetch=[a, dist.log_prob(a), dist.entropy()])
    ref = torch.distributions.Categorical(logits=torch.tensor(logits))
    freq = np.bincount(samples, minlength=3) / samples.size
    np.testing.assert_allclose(freq, [0.1, 0.6, 0.3], atol=0.03)
    np.testing.assert_allclose(log_prob, ref.log_prob(torch.tensor(samples)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(entropy, ref.entropy().item(), rtol=1e-5)


def test_normal_matches_torch():
    with tpo.Context(seed=0) as ctx:
        (t, T), = ctx.dims("t")
        mean = tpo.from_numpy(np.full((2000,), 1.5, np.float32))
        dist = tpo.nn.Normal(mean + tpo.eval_symbol(t).cast("float32") * 0.0, 0.5)
        x = dist.sample()
        xs, log_prob, entropy = ctx.run({T: 2}, fetch=[x, dist.log_prob(x), dist.entropy()])
    ref = torch.distributions.Normal(1.5, 0.5)
    assert abs(xs.mean() - 1.5) < 0.03 and abs(xs.std() - 0.5) < 0.03
    np.testing.assert_allclose(log_prob, ref.log_prob(torch.tensor(xs)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(entropy, ref.entropy().item(), rtol=1e-6)


def test_unknown_activation_is_an_error():
    with tpo.Context(), pytest.raises(tpo.TempoError, match="unknown activation 'swish'"):
        tpo.nn.MLP(2, [3], 1, activation="swish")


def test_a_layer_size_that_is_not_a_positive_int_is_an_error():
    with tpo.Context():
        with pytest.raises(tpo.TempoError, match="Linear: out_features must be a positive int, got None"):
            tpo.nn.MLP(3, [8], None)
        with pytest.raises(tpo.TempoError, match="Linear: in_features must be a positive int, got 0"):
            tpo.nn.Linear(0, 2)
