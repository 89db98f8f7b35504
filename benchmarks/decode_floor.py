"""LLM decoding against the memory-bandwidth floor: a 135M-parameter Llama-family model from GGUF files.

The model has the sizes of a published 135M-parameter Llama-family model (30
layers, hidden 576, 9 heads and 3 key/value heads, intermediate 1,536,
vocabulary 49,152, tied embeddings) with random weights, written as GGUF files
of each type in ``--types`` (gguf.quants quantizes them). Decoded greedily on
one thread, each system in its own process, at each batch size of ``--batch``
(that many sequences from one-token prompts, token ids 1, 2, ..., decoded
together: one step is a token of every sequence):

- **tempo**: ``tpo.llm.Llama`` on the NumPy backend, weights dequantised to float32;
- **tempo-q**: the same with the matrices kept quantised (``quantized=True``:
  each product computed from the blocks, ``tempo.llm.quantized``: for up to 8
  rows by the native kernels of ``tempo/llm/quantized_kernels.c``, built with
  the machine's C compiler at first use, which widen each block once for up to
  4 rows), NumPy backend;
- **tempo-q8**: tempo-q with each product's input rows rounded to 8 bits per
  block of 32 first (``int8_inputs=True``, as llama.cpp rounds its
  activations): integer dot products (``tempo/llm/int8_input_kernels.c``,
  AVX512-VNNI), the logits those of the rounded inputs;
- **tempo-q-torch**: tempo-q on the torch backend (the products are the same
  host function; the rest of the step runs as torch eager kernels);
- **tempo-jax**: tempo (float32) on the JAX backend (causal decoding as one
  device program per launch: ``tempo.transforms.masked_reads``), XLA's CPU
  client on one thread;
- **tempo-q-profile**: tempo-q with the CPU time inside the quantised products
  and inside the NumPy backend's other products (attention's; the rotary one
  where it is not in a host function) taken apart (``products_cpu_ms``,
  ``other_matmul_cpu_ms``; each call timed);
- **tempo-q8-profile**: tempo-q8 the same way;
- **tempo-profile**: tempo (float32) the same way: the weight products (a row
  by a matrix stored as panels, ``products_cpu_ms``) and the NumPy backend's
  other products (attention's and the rotary one, ``other_matmul_cpu_ms``);
- **transformers**: ``LlamaForCausalLM`` loaded from the same file (its GGUF
  loader dequantises to float32), eager, one forward per token with its cache;
- **llama.cpp** (``llama-cpp-python``, a benchmark-only baseline, computing from
  the quantised weights), through its own API: a context of ``batch``
  sequences and one ``llama_decode`` a step of a ``llama_batch`` holding one
  token per sequence; installed by ``--setup`` (a source build, about 5
  minutes here), left out with a note when it is not installed.

The floor of a system is the bytes it reads per step (its weights as it holds
them, once for the whole batch, and every sequence's keys and values of every
position so far) divided by this CPU's
read bandwidth, measured in the same run by reading a buffer of that many bytes
over and over (one thread, the best of several passes): weights that fit the
cache are read at the cache's rate, so the floor uses the rate of the size read.
The time of a step at a length is the median over the last ``--last`` steps
of sequences decoded up to it (per token: the step over the batch). The time to
first token is a prompt of ``--prompts`` tokens through the model and the first
new token (Tempo: the run apart from compiling, which is reported beside it).

``--parts first --prefill-chunks 0 256`` times the first token alone, Tempo's
prefill as one chunk of the whole prompt (0) and in chunks of 256 positions
(a dim of the program: each chunk runs every layer, its attention one op over
the chunks up to it: on NumPy, BLAS products around the native softmax of
``tempo/runtime/backends/numpy_attention.c``, or NumPy ops where it is not
built: ``attention_kernel`` in the JSON), with each process's peak RSS, the
compile time and the compiled program's nodes; ``rss_mb`` in the JSON: the
resident memory after importing Tempo, loading the model, building the
program, compiling it and running it (the decoding runs report their peak
RSS too, ``peak_rss_mb`` in the JSON's ``raw``). ``--tempo-from DIR`` runs the
Tempo of another checkout (a worktree of an earlier commit) with this script,
for a before/after comparison in one sitting (``tempo_commit`` in the JSON). K-quant files (``--types Q4_K Q6_K``)
hold the matrices whose rows are not a multiple of 256 in another type
(:data:`K_FALLBACK`).

    .venv/bin/python benchmarks/decode_floor.py --quick      # every part, short lengths
    .venv/bin/python benchmarks/decode_floor.py --setup      # builds llama-cpp-python first
    .venv/bin/python benchmarks/decode_floor.py

Prints tables and writes ``docs/results/decode_floor.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZE = dict(vocab=49152, hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3)
LLAMA_CPP = "llama-cpp-python==0.3.36"
# its source build: the library and the CPU backend for this machine only (no multimodal library, tests,
# examples or tools), every core compiling
LLAMA_CPP_BUILD = {"CMAKE_ARGS": "-DLLAVA_BUILD=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
                                 "-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF",
                   "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}
# XLA's CPU client: a pool of one thread (PJRT_NPROC; one per core otherwise, running independent operations at
# once) and no operation split over threads
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PJRT_NPROC": "1",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}


# ----- the model files -----
# A K-quant's blocks hold 256 weights: a matrix whose rows are not a multiple of that (576 inputs
# here) is written in another type, as llama.cpp's quantizer does (Q6_K -> Q8_0; Q4_K -> Q4_0,
# where llama.cpp writes Q5_0, which Tempo does not read).
K_FALLBACK = {"Q4_K": "Q4_0", "Q6_K": "Q8_0"}


def random_k_blocks(type_name: str, rows: int, cols: int, rng) -> np.ndarray:
    """Random K-quant bytes (gguf cannot quantize K-quants) with float16 scales small enough for
    weights of about 1 / sqrt(cols): Q4_K's ``d`` and ``dmin`` at bytes 0 and 2, Q6_K's ``d`` at 208."""
    size, offsets, scale = {"Q4_K": (144, (0, 2), 1 / 63 / 15 / 3), "Q6_K": (210, (208,), 1 / 16 / 1400)}[type_name]
    blocks = rng.integers(0, 256, (rows * cols // 256, size), dtype=np.uint8)
    for at in offsets:
        d = rng.uniform(0.5, 1.0, (len(blocks), 1)) * scale * 16 / np.sqrt(cols)
        blocks[:, at:at + 2] = d.astype(np.float16).view(np.uint8)
    return blocks.reshape(rows, -1)


def write_model(path: str, type_name: str, context: int, seed: int = 0) -> None:
    """A GGUF file of SIZE with random weights (normal / sqrt(fan in); norms one) in ``type_name``,
    with a byte-level vocabulary padded with placeholder tokens (llama.cpp needs one)."""
    import gguf
    from gguf import quants
    from tokenizers import pre_tokenizers

    s, rng = SIZE, np.random.default_rng(seed)
    head_dim = s["hidden"] // s["heads"]

    def matrix(rows: int, cols: int):
        w = (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float32)
        if type_name == "F32":
            return (w,)
        own = type_name if type_name not in K_FALLBACK or cols % 256 == 0 else K_FALLBACK[type_name]
        kind = gguf.GGMLQuantizationType[own]
        return (random_k_blocks(own, rows, cols, rng) if own in K_FALLBACK else quants.quantize(w, kind), None, kind)

    w = gguf.GGUFWriter(path + ".part", "llama")
    for add, value in [(w.add_name, "random 135M"), (w.add_context_length, context),
                       (w.add_embedding_length, s["hidden"]), (w.add_block_count, s["layers"]),
                       (w.add_feed_forward_length, s["intermediate"]), (w.add_head_count, s["heads"]),
                       (w.add_head_count_kv, s["kv_heads"]), (w.add_layer_norm_rms_eps, 1e-5),
                       (w.add_rope_freq_base, 10000.0), (w.add_rope_dimension_count, head_dim),
                       (w.add_vocab_size, s["vocab"]), (w.add_tokenizer_model, "gpt2"),
                       (w.add_tokenizer_pre, "default")]:
        add(value)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = alphabet + ["Ġt"] + [f"<t{i}>" for i in range(s["vocab"] - len(alphabet) - 2)] + ["<|endoftext|>"]
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 1) + [3])
    w.add_token_merges(["Ġ t"])
    w.add_eos_token_id(len(tokens) - 1)
    w.add_tensor("token_embd.weight", *matrix(s["vocab"], s["hidden"]))
    w.add_tensor("output_norm.weight", np.ones(s["hidden"], np.float32))
    q_rows, kv_rows = s["heads"] * head_dim, s["kv_heads"] * head_dim
    for i in range(s["layers"]):
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight", np.ones(s["hidden"], np.float32))
        for name, rows, cols in [("attn_q", q_rows, s["hidden"]), ("attn_k", kv_rows, s["hidden"]),
                                 ("attn_v", kv_rows, s["hidden"]), ("attn_output", s["hidden"], q_rows),
                                 ("ffn_gate", s["intermediate"], s["hidden"]),
                                 ("ffn_up", s["intermediate"], s["hidden"]),
                                 ("ffn_down", s["hidden"], s["intermediate"])]:
            w.add_tensor(f"blk.{i}.{name}.weight", *matrix(rows, cols))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".part", path)


def kv_bytes(length: int, batch: int, element: int) -> int:
    """Bytes of keys and values one decoding step reads at ``length`` positions."""
    head_dim = SIZE["hidden"] // SIZE["heads"]
    return 2 * SIZE["layers"] * batch * SIZE["kv_heads"] * head_dim * length * element


# ----- what the children measure -----
def bandwidth(nbytes: int, passes: int = 5) -> dict:
    """GB/s of reading a float32 buffer of ``nbytes`` (one BLAS dot product of it with itself, which
    streams it once), the best of ``passes`` after a warm-up, by the wall clock and by the process
    CPU clock (on a busy machine the process is not always running)."""
    a = np.ones(max(nbytes // 4, 1024), np.float32)
    np.dot(a, a)
    runs = [_timed(lambda: np.dot(a, a)) for _ in range(passes)]
    return {"wall": a.nbytes / min(w for w, _ in runs) / 1e9, "cpu": a.nbytes / max(min(c for _, c in runs), 1e-9) / 1e9}


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _between(stamps: dict, lengths: list[int], last: int, parts: tuple = ()) -> dict:
    """Per length: the median wall and mean CPU time between the last ``last`` tokens (the mean wall
    time where most tokens reach the host together, a device loop's launch at a time, so that the
    median is one of the gaps inside a launch); with ``parts`` (names of the stamps' further
    clocks), each one's mean CPU time per token."""
    rows = {}
    for n in lengths:
        steps = [p for p in range(n - last, n) if p in stamps and p - 1 in stamps]
        deltas = np.array([np.subtract(stamps[p], stamps[p - 1]) for p in steps])
        wall = deltas[:, 0]
        together = 2 * np.count_nonzero(wall < 1e-4) > len(wall)  # under 0.1 ms apart: one launch's tokens
        rows[str(n)] = {"ms": 1e3 * float(np.mean(wall) if together else np.median(wall)),
                        "mean_ms": 1e3 * float(np.mean(wall)),
                        "cpu_ms": 1e3 * float(np.mean(deltas[:, 1]))}
        rows[str(n)].update({f"{name}_cpu_ms": 1e3 * float(np.mean(deltas[:, 2 + i])) for i, name in enumerate(parts)})
    return rows


def decode_tempo(path: str, quantized: bool, lengths: list[int], last: int, batch: int = 1,
                 backend: str = "numpy", profile: bool = False, int8_inputs: bool = False) -> dict:
    """With ``profile``: also the CPU time per step inside the weight products (the quantised
    ones' host function, or the NumPy backend's products by weight panels: a fused island's linear
    layers, :class:`~tempo.runtime.backends.skinny_products.RowsByPanels`, and the others) and inside the NumPy
    backend's other products (attention's, or its native step kernel with the softmax where an island
    calls it, :func:`~tempo.runtime.backends.numpy_attention.step`; the rotary one where it is not
    in a host function), each call timed (about 2 us added per call)."""
    import tempo as tpo
    from tempo.llm.quantized import QuantizedMatrices
    from tempo.runtime.backends import numpy as numpy_backend
    from tempo.runtime.backends import numpy_attention, skinny_products

    clocks = {"products": 0.0, "other_matmul": 0.0}
    if profile:
        def timed(fn, clock):
            def run(*args):
                start = time.process_time()
                out = fn(*args)
                clocks[clock] += time.process_time() - start
                return out
            return run

        QuantizedMatrices.matmul = timed(QuantizedMatrices.matmul, "products")
        if hasattr(skinny_products, "RowsByPanels"):  # (a tree of --tempo-from may not have it)
            skinny_products.RowsByPanels.__call__ = timed(skinny_products.RowsByPanels.__call__, "products")
        if hasattr(numpy_attention, "step"):  # a decoding step's attention in one kernel: its products and softmax
            numpy_attention.step = timed(numpy_attention.step, "other_matmul")
        by_panels, others = timed(numpy_backend._matmul, "products"), timed(numpy_backend._matmul, "other_matmul")
        numpy_backend._matmul = lambda a, b: (by_panels if b.ndim == 3 and a.ndim > 2 and a.shape[-3] == 1
                                              else others)(a, b)
    model = (tpo.llm.Llama.from_pretrained(path, quantized=quantized, int8_inputs=True) if int8_inputs
             else tpo.llm.Llama.from_pretrained(path, quantized=quantized))
    stamps = {}
    model.generate(first_tokens(batch)[:, None], max(lengths) - 1, stop_at_eos=False, backend=backend,
                   on_token=lambda tokens, p: stamps.__setitem__(p, (time.perf_counter(), time.process_time(),
                                                                     *clocks.values())))
    return {"rows": _between(stamps, lengths, last, tuple(clocks) if profile else ()),
            "weight_bytes": model.weights.bytes_per_token(), "kv_element": 4, "peak_rss_mb": peak_rss_mb()}


def decode_transformers(path: str, lengths: list[int], last: int, batch: int = 1) -> dict:
    import torch
    import transformers

    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                              dtype=torch.float32).eval()
    stamps = {}
    with torch.no_grad():
        out = model(torch.tensor(first_tokens(batch)[:, None]), use_cache=True)
        for p in range(1, max(lengths)):
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(token, past_key_values=out.past_key_values, use_cache=True)
            stamps[p] = (time.perf_counter(), time.process_time())
    weights = sum(p.nbytes for p in model.parameters())      # a tied head counted once
    embed = model.model.embed_tokens.weight
    if model.lm_head.weight is not embed:                      # the lookup reads one row of the embedding
        weights -= embed.nbytes - embed[0].nbytes
    return {"rows": _between(stamps, lengths, last), "weight_bytes": int(weights), "kv_element": 4,
            "peak_rss_mb": peak_rss_mb()}


def rss_mb() -> float:
    """The process's resident memory now, in MB (``VmRSS``: its mapped file pages included)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1e3


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def first_tokens(batch: int) -> np.ndarray:
    """The one-token prompts of ``batch`` sequences (token ids 1, 2, ...), the same for every system."""
    return np.arange(1, batch + 1, dtype=np.int64)


def decode_llamacpp(path: str, lengths: list[int], last: int, batch: int = 1) -> dict:
    """``batch`` sequences decoded together with llama.cpp's own API: a context of ``batch``
    sequences (each its own key/value cells) and, at each step, one ``llama_batch`` holding one
    token per sequence (its sequence id and position) through one ``llama_decode``; the
    context's other settings are ``llama_cpp.Llama``'s (one thread, float16 keys and values)."""
    import llama_cpp as lc

    llm = lc.Llama(model_path=path, n_ctx=max(lengths) + 8, n_threads=1, n_threads_batch=1, verbose=False)
    params = llm.context_params
    params.n_ctx, params.n_seq_max, params.kv_unified = batch * (max(lengths) + 8), batch, False
    ctx = lc.llama_init_from_model(llm.model, params)
    step = lc.llama_batch_init(batch, 0, 1)
    tokens, stamps = first_tokens(batch).tolist(), {}
    try:
        for p in range(max(lengths)):
            step.n_tokens = batch
            for i, token in enumerate(tokens):
                step.token[i], step.pos[i], step.n_seq_id[i], step.logits[i] = token, p, 1, 1
                step.seq_id[i][0] = i
            if lc.llama_decode(ctx, step) != 0:
                raise RuntimeError(f"llama_decode failed at position {p}")
            tokens = [int(np.argmax(_logits(ctx, i, llm.n_vocab()))) for i in range(batch)]
            stamps[p] = (time.perf_counter(), time.process_time())
    finally:
        lc.llama_batch_free(step)
        lc.llama_free(ctx)
    tensor_bytes = os.path.getsize(path)  # the file is its tensors and a few MB of metadata and vocabulary
    return {"rows": _between(stamps, lengths, last), "weight_bytes": tensor_bytes, "kv_element": 2}


def _logits(ctx, i: int, vocab: int) -> np.ndarray:
    """The logits of the ``i``-th token of the last batch ``ctx`` decoded (-1: the last one)."""
    import llama_cpp

    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(vocab,))


def first_token_tempo(path: str, quantized: bool, length: int, chunk: int) -> dict:
    """``chunk``: the prefill's chunk (0: the whole prompt as one chunk). ``nodes``: the compiled
    program's nodes (its size)."""
    import tempo as tpo
    from tempo.llm import program as program_mod
    from tempo.llm.sampling import Sampling
    from tempo.runtime.backends import numpy_attention

    stages = {"imported": rss_mb()}
    model = tpo.llm.Llama.from_pretrained(path, quantized=quantized)
    stages["loaded"] = rss_mb()
    prompt = np.random.default_rng(0).integers(0, SIZE["vocab"], (1, length))
    with tpo.Context() as ctx:
        dp = program_mod.build(model.config, model.weights, prompt, model.default_attention(), Sampling(),
                               prefill_chunk=chunk or length)
        stages["built"] = rss_mb()
        started, started_cpu = time.perf_counter(), time.process_time()
        program = ctx.compile(fetch=[dp.tokens], passes=program_mod.compile_passes(dp, None, 1))
        compile_s, compile_cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
    stages["compiled"] = rss_mb()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu, wall = time.process_time(), time.perf_counter()
    program.run(dp.bounds(SIZE["layers"], 1))
    stages["ran"] = rss_mb()
    return {"s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "compile_s": compile_s,
            "compile_cpu_s": compile_cpu_s, "rss_mb": stages,
            "imports_torch": "torch" in sys.modules, "imports_transformers": "transformers" in sys.modules,
            "chunk": chunk, "nodes": len(program.sdg.nodes), "peak_rss_mb": peak_rss_mb(),
            "rss_before_run_mb": before / 1e3, "attention_kernel": numpy_attention.unavailable() or "native"}


def first_token_transformers(path: str, length: int) -> dict:
    import torch
    import transformers

    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                              dtype=torch.float32).eval()
    prompt = torch.tensor(np.random.default_rng(0).integers(0, SIZE["vocab"], (1, length)))
    cpu, wall = time.process_time(), time.perf_counter()
    with torch.no_grad():
        model(prompt).logits[:, -1].argmax(-1)
    return {"s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "peak_rss_mb": peak_rss_mb()}


def first_token_llamacpp(path: str, length: int) -> dict:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=path, n_ctx=length + 8, n_threads=1, n_threads_batch=1, verbose=False)
    prompt = np.random.default_rng(0).integers(0, SIZE["vocab"], length).tolist()
    cpu, wall = time.process_time(), time.perf_counter()
    llm.eval(prompt)
    int(np.argmax(_logits(llm.ctx, -1, llm.n_vocab())))
    return {"s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}


DECODE = {"tempo": lambda s: decode_tempo(s["path"], False, s["lengths"], s["last"], s["batch"]),
          "tempo-q": lambda s: decode_tempo(s["path"], True, s["lengths"], s["last"], s["batch"]),
          "tempo-q8": lambda s: decode_tempo(s["path"], True, s["lengths"], s["last"], s["batch"], int8_inputs=True),
          "tempo-q-torch": lambda s: decode_tempo(s["path"], True, s["lengths"], s["last"], s["batch"], "torch"),
          "tempo-jax": lambda s: decode_tempo(s["path"], False, s["lengths"], s["last"], s["batch"], "jax"),
          "tempo-q-profile": lambda s: decode_tempo(s["path"], True, s["lengths"], s["last"], s["batch"],
                                                    profile=True),
          "tempo-q8-profile": lambda s: decode_tempo(s["path"], True, s["lengths"], s["last"], s["batch"],
                                                     profile=True, int8_inputs=True),
          "tempo-profile": lambda s: decode_tempo(s["path"], False, s["lengths"], s["last"], s["batch"],
                                                  profile=True),
          "transformers": lambda s: decode_transformers(s["path"], s["lengths"], s["last"], s["batch"]),
          "llama.cpp": lambda s: decode_llamacpp(s["path"], s["lengths"], s["last"], s["batch"])}
FIRST = {"tempo": lambda s: first_token_tempo(s["path"], False, s["prompt"], s["chunk"]),
         "tempo-q": lambda s: first_token_tempo(s["path"], True, s["prompt"], s["chunk"]),
         "transformers": lambda s: first_token_transformers(s["path"], s["prompt"]),
         "llama.cpp": lambda s: first_token_llamacpp(s["path"], s["prompt"])}


def child(spec: dict) -> dict:
    if spec["part"] == "bandwidth":
        return {str(n): bandwidth(n) for n in spec["sizes"]}
    return (FIRST if spec["part"] == "first" else DECODE)[spec["system"]](spec)


def run_child(spec: dict, timeout: float, tempo_from: str = ROOT) -> dict:
    """``spec`` run in a child process on one thread, importing the tempo of the checkout ``tempo_from``."""
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout, cwd=ROOT,
                              env={**os.environ, **ONE_THREAD, "PYTHONPATH": tempo_from})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def checkout_commit(path: str) -> str:
    """The short commit of the checkout at ``path`` (with ``+`` when its tracked files differ from it)."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=path).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def llamacpp_available(setup: bool) -> bool:
    """Whether llama-cpp-python imports; with ``setup``, build and install it first if it does not."""
    check = [sys.executable, "-c", "import llama_cpp"]
    if subprocess.run(check, capture_output=True).returncode == 0:
        return True
    if setup:
        print(f"building {LLAMA_CPP} from source (140 objects: about 5 minutes on 2 idle cores)...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", LLAMA_CPP], env={**os.environ, **LLAMA_CPP_BUILD},
                       check=False)
    return subprocess.run(check, capture_output=True).returncode == 0


# ----- the run -----
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="short lengths and prompts, to check the script")
    parser.add_argument("--setup", action="store_true", help=f"pip install {LLAMA_CPP} (a source build) if missing")
    parser.add_argument("--types", nargs="+", default=["Q8_0", "Q4_1"], help="GGUF types of the model files")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--last", type=int, default=32)
    parser.add_argument("--batch", type=int, nargs="+", default=[1],
                        help="sequences decoded together (each batch size its own runs)")
    parser.add_argument("--prompts", type=int, nargs="+", default=[128, 1024, 4096])
    parser.add_argument("--systems", nargs="+", default=list(DECODE))
    parser.add_argument("--parts", nargs="+", default=["decode", "first"], choices=["decode", "first"],
                        help="decode: time per token against the floor; first: time to first token")
    parser.add_argument("--prefill-chunks", type=int, nargs="+", default=[1024],
                        help="Tempo's prefill chunks (prompt positions; 0: the whole prompt as one chunk)")
    parser.add_argument("--tempo-from", default=ROOT,
                        help="the checkout whose tempo the Tempo runs import (default: this one; another commit's "
                             "worktree for a before/after comparison in one sitting)")
    parser.add_argument("--workdir", default=os.path.join("/tmp", "tempo_decode_floor"), help="where the GGUF files go")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "decode_floor.json"))
    ns = parser.parse_args()
    if ns.child:
        print(json.dumps(child(json.loads(ns.child))))
        return
    if ns.quick:
        ns.lengths, ns.last, ns.prompts = [48, 96], 16, [32, 128]
    systems = [s for s in ns.systems if s != "llama.cpp" or llamacpp_available(ns.setup)]
    if "llama.cpp" in ns.systems and "llama.cpp" not in systems:
        print(f"llama.cpp: {LLAMA_CPP} is not installed (run with --setup to build it); left out", flush=True)
    started = time.perf_counter()
    os.makedirs(ns.workdir, exist_ok=True)
    context = max(ns.lengths + ns.prompts) + 16
    files = {}
    for type_name in ns.types:
        files[type_name] = os.path.join(ns.workdir, f"random135m-{type_name}-{context}.gguf")
        if not os.path.exists(files[type_name]):
            print(f"writing {files[type_name]}...", flush=True)
            write_model(files[type_name], type_name, context)
    results, first, rates = [], [], {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout

    def save() -> None:              # after every child: a run cut short keeps what it measured
        report = {"commit": commit.strip(), "machine": platform.processor() or platform.machine(),
                  "cpus": os.cpu_count(), "load_average": os.getloadavg(), "size": SIZE, "quick": ns.quick,
                  "bandwidth_gb_s": rates, "decode": floor_rows(results, rates, ns.lengths) if rates else [],
                  "first_token": first, "raw": results, "seconds": time.perf_counter() - started}
        os.makedirs(os.path.dirname(ns.out), exist_ok=True)
        with open(ns.out + ".part", "w") as f:
            json.dump(report, f, indent=1)
        os.replace(ns.out + ".part", ns.out)

    runs = [(t, path, system) for t, path in files.items() for system in systems
            if system not in ("tempo", "transformers") or t == ns.types[0]]   # float32: the same from any file
    for batch in ns.batch if "decode" in ns.parts else []:
        for type_name, path, system in runs:
            out = run_child({"part": "decode", "system": system, "path": path, "lengths": ns.lengths,
                             "last": ns.last, "batch": batch}, timeout=3600,
                            tempo_from=ns.tempo_from if system.startswith("tempo") else ROOT)
            if system.startswith("tempo"):
                out["tempo_commit"] = checkout_commit(ns.tempo_from)
            results.append({"system": system, "type": type_name, "batch": batch, **out})
            print(f"decode {system:12s} {type_name} batch {batch}: {out.get('error') or out['rows']}, "
                  f"peak RSS {out.get('peak_rss_mb', 0):.0f} MB", flush=True)
            save()
    if "decode" in ns.parts:
        sizes = sorted({step_bytes(r, n) for r in results if "rows" in r for n in ns.lengths} | {2 ** 31})
        rates.update(run_child({"part": "bandwidth", "sizes": sizes}, timeout=1800))
        save()
        print(floor_table(floor_rows(results, rates, ns.lengths), rates), flush=True)
    for type_name, path, system in runs if "first" in ns.parts else []:
        if system not in FIRST:
            continue
        for prompt in ns.prompts:
            for chunk in ns.prefill_chunks if system.startswith("tempo") else [None]:
                out = run_child({"part": "first", "system": system, "path": path, "prompt": prompt,
                                 "chunk": chunk}, timeout=3600,
                                tempo_from=ns.tempo_from if system.startswith("tempo") else ROOT)
                if system.startswith("tempo"):
                    out["tempo_commit"] = checkout_commit(ns.tempo_from)
                first.append({"system": system, "type": type_name, "prompt": prompt, **out})
                print(f"first token {system:12s} {type_name} prompt {prompt}: {out}", flush=True)
                save()
    print(floor_table(floor_rows(results, rates, ns.lengths), rates))
    print(first_table(first))
    print(f"wrote {ns.out}")


def step_bytes(result: dict, length: int) -> int:
    """Bytes a decoding step of ``result``'s system reads at ``length`` positions: its weights once
    for the whole batch, and every sequence's keys and values."""
    return result["weight_bytes"] + kv_bytes(length, result.get("batch", 1), result["kv_element"])


def floor_rows(results: list[dict], rates: dict, lengths: list[int]) -> list[dict]:
    """Each system's time per step (a token of every sequence of the batch) against its floor:
    bytes read per step over the read rate measured for a buffer of that size."""
    rows = []
    for r in results:
        batch = r.get("batch", 1)
        if "rows" not in r:
            rows.append({"system": r["system"], "type": r["type"], "batch": batch, "error": r.get("error")})
            continue
        for n in lengths:
            nbytes = step_bytes(r, n)
            rate = rates.get(str(nbytes)) or rates[min(rates, key=lambda k: abs(int(k) - nbytes))]
            floor_ms, cpu_floor_ms = nbytes / rate["wall"] / 1e6, nbytes / rate["cpu"] / 1e6
            got = r["rows"][str(n)]
            rows.append({"system": r["system"], "type": r["type"], "batch": batch, "length": n, "ms": got["ms"],
                         "cpu_ms": got["cpu_ms"], "ms_per_token": got["ms"] / batch,
                         "cpu_ms_per_token": got["cpu_ms"] / batch, "mb_per_step": nbytes / 1e6,
                         "gb_s": rate["wall"], "cpu_gb_s": rate["cpu"], "floor_ms": floor_ms,
                         "cpu_floor_ms": cpu_floor_ms, "x_floor": got["ms"] / floor_ms,
                         "cpu_x_floor": got["cpu_ms"] / cpu_floor_ms,
                         **{k: v for k, v in got.items() if k.endswith("_cpu_ms") and k != "cpu_ms"}})
    baseline = {(r["type"], r["batch"], r["length"]): r for r in rows if r["system"] == "llama.cpp" and "error" not in r}
    for r in rows:
        base = baseline.get((r["type"], r["batch"], r.get("length")))
        if base is not None:
            r["x_llamacpp"], r["cpu_x_llamacpp"] = r["ms"] / base["ms"], r["cpu_ms"] / base["cpu_ms"]
    return rows


def floor_table(rows: list[dict], rates: dict) -> str:
    lines = ["read bandwidth (one thread, GB/s by buffer MB, wall / CPU clock): "
             + ", ".join(f"{int(k) / 1e6:.0f}: {v['wall']:.1f} / {v['cpu']:.1f}"
                         for k, v in sorted(rates.items(), key=lambda kv: int(kv[0]))),
             "| system | file | batch | length | ms per step | CPU ms per step | CPU ms per token | MB read per step "
             "| GB/s at that size (wall / CPU) | floor ms (wall / CPU) | x floor (wall / CPU) "
             "| x llama.cpp (wall / CPU) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['system']} | {r['type']} | {r['batch']} | | {r['error']} | | | | | | | |")
            continue
        versus = f"{r['x_llamacpp']:.2f} / {r['cpu_x_llamacpp']:.2f}" if "x_llamacpp" in r else ""
        lines.append(f"| {r['system']} | {r['type']} | {r['batch']} | {r['length']} | {r['ms']:.1f} | "
                     f"{r['cpu_ms']:.1f} | {r['cpu_ms_per_token']:.2f} | {r['mb_per_step']:.0f} | "
                     f"{r['gb_s']:.1f} / {r['cpu_gb_s']:.1f} | {r['floor_ms']:.1f} / {r['cpu_floor_ms']:.1f} | "
                     f"{r['x_floor']:.2f} / {r['cpu_x_floor']:.2f} | {versus} |")
    split = [r for r in rows if "products_cpu_ms" in r]
    if split:
        lines += ["", "| system | file | batch | length | CPU ms per step | weight products "
                  "| other products (NumPy backend) | the rest |", "|---|---|---|---|---|---|---|---|"]
        for r in split:
            rest = r["cpu_ms"] - r["products_cpu_ms"] - r["other_matmul_cpu_ms"]
            lines.append(f"| {r['system']} | {r['type']} | {r['batch']} | {r['length']} | {r['cpu_ms']:.1f} | "
                         f"{r['products_cpu_ms']:.1f} | {r['other_matmul_cpu_ms']:.1f} | {rest:.1f} |")
    return "\n".join(lines)


def first_table(first: list[dict]) -> str:
    lines = ["| system | tempo | file | prompt | prefill chunk | first token s | CPU s | compile s (CPU) | nodes | "
             "peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in first:
        chunk = "" if r.get("chunk") is None else (r["chunk"] or "whole prompt")
        if "error" in r:
            lines.append(f"| {r['system']} | {r.get('tempo_commit', '')} | {r['type']} | {r['prompt']} | {chunk} | "
                         f"{r['error']} | | | | |")
            continue
        compile_s = f"{r['compile_s']:.2f}" if "compile_s" in r else ""
        compile_s += f" ({r['compile_cpu_s']:.2f})" if "compile_cpu_s" in r else ""
        rss = f"{r['peak_rss_mb']:.0f}" if "peak_rss_mb" in r else ""
        lines.append(f"| {r['system']} | {r.get('tempo_commit', '')} | {r['type']} | {r['prompt']} | {chunk} | "
                     f"{r['s']:.2f} | {r['cpu_s']:.2f} | {compile_s} | {r.get('nodes', '')} | {rss} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
