"""tpo.llm decodes on the NumPy backend with row programs (tempo/runtime/backends/numpy_rows.py): its
norms, rotary embedding and SwiGLU run natively, and the greedy tokens are transformers'."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime.backends import numpy_rows

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(numpy_rows.library() is None, reason="the row program kernel is not built here")


class CountingRuns:
    """The loaded library, counting what its row programs' calls return."""

    def __init__(self, lib):
        self.lib, self.statuses = lib, []

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def run(self, address, arrays):
        self.statuses.append(self.lib.run(address, arrays))
        return self.statuses[-1]


def test_greedy_decoding_runs_row_programs_and_gives_transformers_tokens(tmp_path, monkeypatch):
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
    counting = CountingRuns(numpy_rows.library())
    monkeypatch.setitem(numpy_rows.KERNELS.loaded, "ready", counting)
    model = tpo.llm.Llama.from_pretrained(str(tmp_path))
    got = model.generate(prompt, max_new_tokens=12, backend="numpy")
    np.testing.assert_array_equal(got, expected)
    assert model.last_program.backend.row_programs
    decoding = [s for s in counting.statuses if s == 0]
    assert len(decoding) >= 11 * 2 * 3  # a norm and SwiGLU's chain a layer, the rotary products, every step
