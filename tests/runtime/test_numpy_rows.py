"""tempo/runtime/backends/numpy_rows.{py,c}: a fused island's elementwise chains as row programs, against
the same island's steps run by NumPy (the reference), to float32 rounding; tpo.llm decoding with them."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.errors import TempoError
from tempo.ir import ops
from tempo.runtime.backends import numpy_rows
from tempo.runtime.backends.numpy import NumPyBackend, _call
from tempo.runtime.backends.numpy_fused import compile_island

pytestmark = pytest.mark.skipif(numpy_rows.library() is None, reason="the row program kernel is not built here")
F32 = "float32"


def step(op, inputs, shape, dtype=F32):
    return ops.FusedStep(op=op, inputs=inputs, dtypes=(dtype,), shapes=(shape,))


def mean(*inputs, shape):
    return step(ops.ReduceOp("mean", (-1,), keepdims=True), inputs, shape)


def fn(name, *inputs, shape):
    return step(ops.ElementwiseOp(name), inputs, shape)


def rms_norm(rows: int, n: int) -> ops.FusedOp:
    """A decoding step's residual add and RMSNorm: h = x + r; h * (mean(h * h) + eps) ** p."""
    return ops.FusedOp(steps=(fn("add", (-1, 0), (-1, 1), shape=(rows, n)), fn("mul", (0, 0), (0, 0), shape=(rows, n)),
                              mean((1, 0), shape=(rows, 1)), fn("add", (2, 0), (-1, 2), shape=(rows, 1)),
                              fn("pow", (3, 0), (-1, 3), shape=(rows, 1)), fn("mul", (0, 0), (4, 0), shape=(rows, n))),
                       outputs=((0, 0), (5, 0)))


class CountingRuns:
    """The loaded library, keeping what its row programs' calls return (0: it ran)."""

    def __init__(self, lib):
        self.lib, self.statuses = lib, []

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def run(self, address, arrays):
        self.statuses.append(self.lib.run(address, arrays))
        return self.statuses[-1]


@pytest.fixture
def runs(monkeypatch) -> CountingRuns:
    """What the row programs compiled in the test return, call by call."""
    counting = CountingRuns(numpy_rows.library())
    monkeypatch.setitem(numpy_rows.KERNELS.loaded, "ready", counting)
    return counting


def both(island: ops.FusedOp, inputs: list) -> tuple:
    """The island's outputs by row programs, and by NumPy's steps."""
    backend = NumPyBackend()
    rows = compile_island(island, backend.kernel, _call, rows=True)(inputs, {}, ())
    return rows, backend.kernel(island)(inputs, {}, ())


def native_runs(island: ops.FusedOp, inputs: list) -> list[int]:
    """What the kernel returns for each row program of the island (0: it ran), given the island's
    inputs where the program reads them."""
    statuses = []
    for _, line, reads, binds in numpy_rows.chains(island, _call, set(), set()).values():
        outs = tuple(np.empty(island.steps[s].shapes[0], np.float32) for s, _ in binds)
        statuses.append(numpy_rows.library().run(line.code.ctypes.data, (*(inputs[k] for _, k in reads), *outs)))
    return statuses


def test_the_array_and_tuple_fields_are_found():
    assert numpy_rows.object_fields() is not None


def test_a_residual_rms_norm_is_one_native_call_with_numpys_numbers():
    rng = np.random.default_rng(0)
    x, r = (rng.normal(size=(3, 37)).astype(np.float32) for _ in range(2))
    inputs = [x, r, np.array(1e-5, np.float32), np.array(-0.5, np.float32)]
    island = rms_norm(3, 37)
    assert list(numpy_rows.chains(island, _call, set(), set())) == [5]
    assert native_runs(island, inputs) == [0]
    (h, y), (h_ref, y_ref) = both(island, inputs)
    np.testing.assert_array_equal(h, h_ref)  # one add: the same bits
    np.testing.assert_allclose(y, y_ref, rtol=2e-6, atol=1e-7)


def test_a_value_read_before_the_chain_ends_is_left_out_of_it():
    """h = x + r read by a step (a cumulative sum) that runs before the norm's last step: h cannot
    wait for the norm's line, so it is its own NumPy call and the norm's line reads it."""
    shape, column = (1, 16), (1, 1)
    island = ops.FusedOp(steps=(fn("add", (-1, 0), (-1, 1), shape=shape), step(ops.CumSumOp(-1), ((0, 0),), shape),
                                fn("mul", (0, 0), (0, 0), shape=shape), mean((2, 0), shape=column),
                                fn("add", (3, 0), (-1, 2), shape=column), fn("pow", (4, 0), (-1, 3), shape=column),
                                fn("mul", (0, 0), (5, 0), shape=shape)),
                         outputs=((1, 0), (6, 0)))
    found = numpy_rows.chains(island, _call, set(), set())
    assert [(*chain, end) for end, (chain, _, _, _) in found.items()] == [(2, 3, 4, 5, 6)]
    inputs = [np.ones(shape, np.float32), np.arange(16, dtype=np.float32)[None], np.array(1e-5, np.float32),
              np.array(-0.5, np.float32)]
    for a, b in zip(*both(island, inputs)):
        np.testing.assert_allclose(a, b, rtol=2e-6)


@pytest.mark.parametrize("case", ["rows apart", "half broadcast"])
def test_rows_anywhere_in_memory_and_broadcast_along_any_axis_run_natively(case):
    rng = np.random.default_rng(1)
    x, r = rng.normal(size=(2, 3, 40)).astype(np.float32)[..., :16], rng.normal(size=(2, 3, 16)).astype(np.float32)
    if case == "half broadcast":
        r = r[:1]  # broadcast along the first lead axis, not the second
    island = _stacked_rms_norm()
    inputs = [x, r, np.array(1e-5, np.float32), np.array(-0.5, np.float32)]
    assert native_runs(island, inputs) == [0]
    for a, b in zip(*both(island, inputs)):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("case", ["float64", "python float", "wrong width", "strided row"])
def test_arrays_the_kernel_does_not_take_run_the_steps_own_calls(case):
    rng = np.random.default_rng(1)
    x, r = rng.normal(size=(2, 3, 16)).astype(np.float32), rng.normal(size=(2, 3, 16)).astype(np.float32)
    eps, p = np.array(1e-5, np.float32), np.array(-0.5, np.float32)
    if case == "float64":
        x = x.astype(np.float64)
    elif case == "python float":
        eps = 1e-5
    elif case == "wrong width":
        x, r = x[..., :8], r[..., :8]
    elif case == "strided row":
        x = np.repeat(x, 2, axis=-1)[..., ::2]
    island = _stacked_rms_norm()
    assert native_runs(island, [x, r, eps, p]) == [1]
    rows, reference = both(island, [x, r, eps, p])
    for a, b in zip(rows, reference):
        assert a.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def _stacked_rms_norm() -> ops.FusedOp:
    """:func:`rms_norm` over rows of shape (2, 3, 16)."""
    return ops.FusedOp(steps=tuple(ops.FusedStep(s.op, s.inputs, s.dtypes, shapes=((2, 3) + s.shapes[0][1:],))
                                   for s in rms_norm(1, 16).steps), outputs=((0, 0), (5, 0)))


UNARY = ["neg", "exp", "sqrt", "sigmoid", "relu"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow"]


@st.composite
def chains(draw):
    """A random island of row steps over inputs of random broadcast kinds: (lead, n), (n,), (lead, 1),
    (), the lead axes all 1 or the first one 1 (lead = (a, b) or (a,)), and whether the inputs' rows
    lie apart in memory (views of wider arrays)."""
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    n = draw(st.integers(2, 40))
    kinds = draw(st.lists(st.sampled_from(["rows", "vector", "column", "scalar", "ones", "part"]), min_size=1,
                          max_size=4))
    shapes = {"rows": lead + (n,), "vector": (n,), "column": lead + (1,), "scalar": (), "ones": (1,) * len(lead) + (n,),
              "part": (1,) + lead[1:] + (n,)}
    inputs = [shapes[k] for k in kinds]
    values = [((-1, k), shape) for k, shape in enumerate(inputs)]  # what steps may read, with their shapes
    steps = []
    for _ in range(draw(st.integers(2, 7))):
        what = draw(st.sampled_from(["unary", "binary", "binary", "reduce"]))
        if what == "reduce":
            rows = [v for v in values if v[1][-1:] == (n,)] or [v for v in values if v[1]]
            if not rows:
                continue
            ref, shape = draw(st.sampled_from(rows))
            op = ops.ReduceOp(draw(st.sampled_from(["sum", "mean", "max"])), (-1,), keepdims=True)
            out = shape[:-1] + (1,)
            refs = (ref,)
        else:
            names = UNARY if what == "unary" else BINARY
            name = draw(st.sampled_from(names))
            picked = [draw(st.sampled_from(values)) for _ in range(1 if what == "unary" else 2)]
            op, refs = ops.ElementwiseOp(name), tuple(ref for ref, _ in picked)
            out = np.broadcast_shapes(*(shape for _, shape in picked))
        steps.append(step(op, refs, tuple(out)))
        values.append(((len(steps) - 1, 0), tuple(out)))
    assume(len(steps) >= 2)
    outputs = tuple((s, 0) for s in range(len(steps)))
    return ops.FusedOp(steps=tuple(steps), outputs=outputs), inputs, draw(st.booleans()), draw(st.integers(0, 2 ** 31))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chains())
def test_random_chains_equal_numpys_to_float32_rounding(runs, case):
    island, shapes, apart, seed = case
    runs.statuses.clear()
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(0.5, 2.0, size=shape[:-1] + (shape[-1] + 3 * apart,)).astype(np.float32)[..., :shape[-1]]
              if shape else rng.uniform(0.5, 2.0, size=shape).astype(np.float32) for shape in shapes]
    with np.errstate(all="ignore"):
        rows, reference = both(island, inputs)
    for a, b in zip(rows, reference):
        assert a.dtype == np.float32 and a.shape == b.shape
        scale = np.nanmax(np.abs(np.where(np.isfinite(b), b, 0)), initial=1.0)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale, equal_nan=True)
    assert not any(runs.statuses)  # every row program ran natively


def test_exp_and_sigmoid_over_the_whole_float_range():
    x = np.concatenate([np.linspace(-120, 100, 4001), [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)[None]
    for name in ("exp", "sigmoid"):
        island = ops.FusedOp(steps=(fn(name, (-1, 0), shape=x.shape), fn("mul", (0, 0), (-1, 1), shape=x.shape)),
                             outputs=((1, 0),))
        with np.errstate(all="ignore"):
            (a,), (b,) = both(island, [x, np.ones(1, np.float32)])
        np.testing.assert_allclose(a, b, rtol=4e-7, atol=3e-45, equal_nan=True)  # 3 ulp; 2 among the subnormals


def test_greedy_decoding_runs_row_programs_and_gives_transformers_tokens(tmp_path, runs):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      eos_token_id=None, bos_token_id=None, pad_token_id=None)
    hf = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    hf.save_pretrained(tmp_path)
    prompt = np.array([[5, 17, 99, 3], [11, 0, 150, 64]], np.int64)
    with torch.no_grad():
        expected = hf.generate(torch.tensor(prompt), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                               attention_mask=torch.ones(prompt.shape, dtype=torch.long)).numpy()
    model = tpo.llm.Llama.from_pretrained(str(tmp_path))
    got = model.generate(prompt, max_new_tokens=12, backend="numpy")
    np.testing.assert_array_equal(got, expected)
    assert model.last_program.backend.row_programs
    assert runs.statuses.count(0) >= 11 * 2 * 4  # a layer's norms, rotary products and SwiGLU, every step


def test_row_programs_take_a_bool():
    with pytest.raises(TempoError, match="row_programs"):
        NumPyBackend(row_programs="yes")
