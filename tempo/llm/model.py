"""``tpo.llm.Llama``: load a Hugging Face Llama/Mistral checkpoint, generate tokens, compute logits."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

import tempo as tpo
from tempo.errors import TempoError
from tempo.llm import program as program_mod
from tempo.llm.attention import AUTO, Attention
from tempo.llm.chat import ChatTemplate, TextStream
from tempo.llm.config import LlamaConfig
from tempo.llm.gguf_file import GGUFFile, read_config
from tempo.llm.quantized import QuantizedMatrices
from tempo.llm.sampling import Sampling
from tempo.llm.tiling import TileChoice, choose_tile
from tempo.llm.tokenizer import gguf_tokenizer, load_tokenizer
from tempo.llm.weights import Weights
from tempo.runtime.backends import get_backend
from tempo.runtime.backends.numpy import NumPyBackend
from tempo.transforms import pack_weights


@dataclass
class Llama:
    """A Llama-family decoder (Llama 2/3, Mistral) run as a Tempo program.

    ``config``: its sizes; ``weights``: its tensors; ``tokenizer``: a
    ``tokenizers.Tokenizer`` or None; ``chat_template``: the checkpoint's chat template
    (:meth:`chat`) or None. Every call builds and compiles one
    program: the layer index and the decoding step are its temporal dims.
    The model holds its float32 matrices once, in the layout its last call's backend multiplies
    that call's batch by (:meth:`hold_weights_for`; from construction, the default backend's
    for one sequence): on NumPy, column panels, which its programs hold as they are.
    ``tile_choices``: the tile sizes ``attention="tiled"`` chose by measurement,
    by ``(backend, batch, new tokens)``. ``last_program``: the compiled program of the last
    :meth:`generate` (its ``lengths`` and ``end_checks``: the decoding steps run).
    """

    config: LlamaConfig
    weights: Weights
    tokenizer: object = None
    chat_template: ChatTemplate | None = None
    tile_choices: dict[tuple, TileChoice] = field(default_factory=dict, repr=False, compare=False)
    last_program: object = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.hold_weights_for(None, 1)

    def hold_weights_for(self, backend: str | None, batch: int) -> None:
        """Hold the float32 matrices in the layout ``backend`` (None: the default one) multiplies
        ``batch`` rows by: the column panels its ``pack_weights`` pass would make of them
        (:func:`tempo.transforms.pack_weights.width_for`; NumPy's, and JAX's on a CPU with its
        native products), or plain matrices (torch), converted one matrix at a time
        (:meth:`Weights.lay_out`). A program built from them then holds the model's own arrays."""
        cfg = pack_weights.Config(panel=get_backend(backend).weight_panel)
        self.weights.lay_out(lambda columns: pack_weights.width_for(cfg, batch, columns))

    @classmethod
    def from_pretrained(cls, path: str, quantized: bool = False, int8_inputs: bool = False) -> "Llama":
        """Load ``path``: a GGUF file (``*.gguf``: :meth:`from_gguf`), or a folder with
        ``config.json``, ``model.safetensors`` (or shards and ``model.safetensors.index.json``),
        optionally ``tokenizer.json`` and ``tokenizer_config.json`` (its chat template)."""
        if path.endswith(".gguf") or os.path.isfile(path):
            return cls.from_gguf(path, quantized, int8_inputs)
        if quantized or int8_inputs:
            raise TempoError(f"quantized=True and int8_inputs=True read GGUF files; {path!r} is a model folder")
        if not os.path.isdir(path):
            raise TempoError(f"model folder {path!r} does not exist")
        config = LlamaConfig.from_file(os.path.join(path, "config.json"))
        tokenizer = load_tokenizer(path)
        return cls(config, Weights.from_folder(path, config), tokenizer, ChatTemplate.from_folder(path))

    @classmethod
    def from_gguf(cls, path: str, quantized: bool = False, int8_inputs: bool = False) -> "Llama":
        """Load a GGUF file: the config from its metadata, the tokenizer and chat template it
        embeds, its weights dequantised to float32; with ``quantized``, the Q8_0, Q4_0, Q4_1,
        Q4_K and Q6_K matrices stay quantised and each product is computed from them
        (:mod:`tempo.llm.quantized`: a host function in the program, on every backend). With
        ``int8_inputs`` too, each of those products first rounds its input rows to 8 bits per
        block of 32, as llama.cpp does (:func:`tempo.llm.quantized.rounded_inputs`): integer dot
        products, faster where AVX512-VNNI is there, the logits no longer those of the float32
        weights."""
        if int8_inputs and not quantized:
            raise TempoError("int8_inputs=True rounds the inputs of products from quantised weights: "
                             "it needs quantized=True")
        f = GGUFFile.read(path)
        config = read_config(f)
        tokenizer, template = gguf_tokenizer(f.metadata, path), ChatTemplate.from_gguf(f.metadata)
        weights = Weights.from_gguf(f, config, quantized)
        del f                                      # the file unmapped before the weights are laid out
        if int8_inputs:
            weights = with_int8_inputs(weights)
        return cls(config, weights, tokenizer, template)

    @classmethod
    def random(cls, config: LlamaConfig, seed: int = 0) -> "Llama":
        """A model of ``config``'s sizes with random weights (no tokenizer)."""
        return cls(config, Weights.random(config, seed))

    def default_attention(self) -> Attention:
        """The checkpoint's own attention: its sliding window if it has one, else causal."""
        return Attention(self.config.sliding_window)

    def generate(self, prompt_ids, max_new_tokens: int, attention=None, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int = 0, stop_at_eos: bool = True, backend: str = "numpy",
                 on_token: Callable[[np.ndarray, int], None] | None = None,
                 stop_tokens: tuple[int, ...] | None = None,
                 prefill_chunk: int = program_mod.PREFILL_CHUNK,
                 end_check_every: int | None = None) -> np.ndarray:
        """Decode ``max_new_tokens`` tokens after ``prompt_ids`` (batch, prompt) or (prompt,).

        ``attention``: ``"causal"``, ``("window", w)`` / ``"window:w"``, ``("tiled", Z)`` /
        ``"tiled:Z"`` (causal attention in static tiles of ``Z`` positions), ``"tiled"`` (the
        tile size measured best on ``backend``: :meth:`tile_for`), ``"masked"`` (causal attention
        over buffers of ``max_new_tokens`` rows carried from step to step, the same shapes at every
        step: one compile per island on JAX), or None for the checkpoint's own. Greedy unless ``do_sample``; sampling (``temperature``,
        ``top_k``, ``top_p``) is tensor ops of the program (:class:`tempo.llm.sampling.Sampling`),
        deterministic given ``seed`` and the same on every backend. ``on_token(tokens, position)`` sees each new token column (batch,) as it
        is produced. Returns the int64 ids (batch, prompt + new); with ``stop_at_eos``,
        a sequence that has produced an end-of-sequence token (one of ``stop_tokens``, default
        the config's) continues with padding (the config's pad token, else its first EOS), and
        the decoding dim ends at run time (``tpo.end_when``) at the step where every sequence
        has: no further model step runs, and the ids end at that column (as ``transformers``'
        ``generate``). ``end_check_every``: steps between host reads of that flag
        (``tpo.Config(end_check_every=...)``; ``on_token`` is a sink of the decoding loop: where
        that loop is one device program, it sees the tokens of each launch after it). ``prefill_chunk``: the prompt's positions a step of the prefill
        runs through every layer at once, its keys and values written to the store before the next
        chunk's (the scores held are batch x heads x ``prefill_chunk`` x prompt at most).
        """
        prompt = self._check_prompt(prompt_ids, max_new_tokens)
        self._check_chunk(prefill_chunk)
        sampling = Sampling(greedy=not do_sample, temperature=temperature, top_k=top_k, top_p=top_p)
        attention = self.default_attention() if attention is None else Attention.parse(attention)
        prompt_len = prompt.shape[1]
        if max_new_tokens == 0:
            return prompt.copy()
        if attention.tile == AUTO:
            attention = replace(attention, tile=self.tile_for(prompt.shape[0], max_new_tokens, backend).tile)
        reported = [prompt_len]

        def report(column: np.ndarray, position: int) -> None:
            if on_token is not None and position == reported[0]:
                on_token(column, position)
                reported[0] += 1

        self.last_program = None                        # its constants freed before the weights are laid out
        self.hold_weights_for(backend, prompt.shape[0])
        with tpo.Context(seed=seed) as ctx:
            dp = program_mod.build(self.config, self.weights, prompt, attention, sampling,
                                   None if on_token is None else report, stop_at_eos,
                                   stop_tokens, prefill_chunk=prefill_chunk, capacity=max_new_tokens)
            config = None if end_check_every is None else tpo.Config(end_check_every=end_check_every)
            chosen = get_backend(backend)
            if type(chosen) is NumPyBackend:  # its elementwise chains as native calls (numpy_rows)
                chosen = NumPyBackend(row_programs=True)
            self.last_program = ctx.compile(fetch=[dp.first, dp.tokens], backend=chosen, config=config,
                                            passes=program_mod.compile_passes(dp, backend, max_new_tokens))
            first, tokens = self.last_program.run(dp.bounds(self.config.num_layers, max_new_tokens))
        steps = int(self.last_program.lengths[dp.positions[1].name]) if dp.ends else tokens.shape[0]
        new = np.concatenate([first[:, None], tokens[:steps].T], axis=1).astype(np.int64)[:, :max_new_tokens]
        if dp.ends:
            new = new[:, :ended_at(new, self.config.eos_token_ids if stop_tokens is None else stop_tokens) + 1]
        ids = np.concatenate([prompt, new], axis=1)
        for position in range(reported[0], ids.shape[1]):      # the last token enters no model step
            report(ids[:, position], position)
        return ids

    def chat(self, messages: list[dict], max_new_tokens: int = 256,
             on_text: Callable[[str], None] | None = None, **options) -> str:
        """The assistant's reply to ``messages`` (dicts with ``role`` and ``content``): the
        checkpoint's chat template renders them with a generation prompt, and decoding stops at
        the template's end-of-turn token (or an end-of-sequence one) or after ``max_new_tokens``
        (fewer if the model's positions run out). ``on_text(piece)`` sees the reply's text as it
        is produced; ``options`` go to :meth:`generate` (sampling, attention, backend)."""
        if self.chat_template is None:
            raise TempoError("the model has no chat template (tokenizer_config.json's chat_template "
                             "or the GGUF metadata's tokenizer.chat_template)")
        if self.tokenizer is None:
            raise TempoError("the model has no tokenizer (tokenizer.json or the GGUF vocabulary): chat needs one")
        text = self.chat_template.render(messages)
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        stops = self.end_of_turn_ids()
        stream = TextStream(self.tokenizer, stops, on_text)
        new = min(max_new_tokens, self.config.max_positions - len(ids))
        self.generate(np.array([ids], np.int64), max(new, 0), on_token=stream, stop_tokens=stops, **options)
        stream.finish()
        return stream.text

    def end_of_turn_ids(self) -> tuple[int, ...]:
        """The tokens that end an assistant's turn: the chat template's end-of-turn token (what it
        writes after a message, when that is one token) and the end-of-sequence tokens."""
        ids = list(self.config.eos_token_ids)
        if self.chat_template is not None and self.tokenizer is not None:
            own = self.tokenizer.token_to_id(self.chat_template.end_of_turn().strip())
            if own is not None and own not in ids:
                ids.insert(0, own)
        return tuple(ids)

    def tile_for(self, batch: int, new_tokens: int, backend: str = "numpy") -> TileChoice:
        """The tile size of ``attention="tiled"`` for ``new_tokens`` decoding steps of ``batch``
        sequences on ``backend``: measured once (:func:`tempo.llm.tiling.choose_tile`), then
        kept in ``tile_choices``; ``str()`` of the choice shows the timings behind it."""
        key = (backend, batch, new_tokens)
        if key not in self.tile_choices:
            c = self.config
            self.tile_choices[key] = choose_tile(batch, c.num_kv_heads, c.num_heads // c.num_kv_heads, c.head_dim,
                                                 new_tokens, backend)
        return self.tile_choices[key]

    def logits(self, ids, attention=None, backend: str = "numpy",
               prefill_chunk: int = program_mod.PREFILL_CHUNK) -> np.ndarray:
        """The next-token logits (batch, length, vocab) at every position of ``ids`` (batch, length),
        all computed in one prefill (in chunks of ``prefill_chunk`` positions; tiles,
        which split decoding steps, play no part)."""
        prompt = self._check_prompt(ids, 0)
        self._check_chunk(prefill_chunk)
        attention = self.default_attention() if attention is None else Attention.parse(attention)
        attention = replace(attention, tile=None)
        self.hold_weights_for(backend, prompt.shape[0])
        with tpo.Context() as ctx:
            dp = program_mod.build(self.config, self.weights, prompt, attention, Sampling(),
                                   prefill_chunk=prefill_chunk, capacity=1)
            (logits,) = ctx.run(bounds=dp.bounds(self.config.num_layers, 1),
                                fetch=[dp.prompt_logits], backend=backend)
        return logits

    @staticmethod
    def _check_chunk(prefill_chunk) -> None:
        if not isinstance(prefill_chunk, (int, np.integer)) or isinstance(prefill_chunk, bool) or prefill_chunk < 1:
            raise TempoError(f"prefill_chunk must be a positive integer, not {prefill_chunk!r}")

    def _check_prompt(self, ids, max_new_tokens: int) -> np.ndarray:
        c = self.config
        array = np.asarray(ids)
        if array.ndim == 1:
            array = array[None, :]
        if array.ndim != 2 or array.shape[1] == 0 or array.shape[0] == 0:
            raise TempoError(f"prompt ids must be a non-empty (batch, length) array, not shape {array.shape}")
        if not np.issubdtype(array.dtype, np.integer):
            raise TempoError(f"prompt ids must be integers, not {array.dtype}")
        if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
            raise TempoError(f"max_new_tokens must be a non-negative integer, not {max_new_tokens!r}")
        bad = array[(array < 0) | (array >= c.vocab_size)]
        if bad.size:
            raise TempoError(f"token id {int(bad[0])} is outside the vocabulary (0..{c.vocab_size - 1})")
        total = array.shape[1] + max_new_tokens
        if total > c.max_positions:
            raise TempoError(f"prompt of {array.shape[1]} tokens plus {max_new_tokens} new ones is longer "
                             f"than the model's maximum of {c.max_positions} positions")
        return array.astype(np.int64)


def ended_at(new: np.ndarray, eos) -> int:
    """The first column of ``new`` (batch, tokens) by which every row has produced one of ``eos``
    (the last column if there is none)."""
    ended = np.logical_or.accumulate(np.isin(new, list(eos)), axis=1).all(axis=0)
    return int(np.argmax(ended)) if ended.any() else new.shape[1] - 1


def with_int8_inputs(weights: Weights) -> Weights:
    """``weights`` with each quantised matrix's products rounding their inputs to 8 bits."""
    def rounded(matrices):
        return matrices.with_int8_inputs() if isinstance(matrices, QuantizedMatrices) else matrices

    return replace(weights, head=rounded(weights.head),
                   layers={name: rounded(value) for name, value in weights.layers.items()})
