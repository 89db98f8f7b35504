"""The quantised product kernels of ``quantized_kernels.c`` and ``int8_input_kernels.c``, built
with this machine's C compiler.

The source is compiled once per machine by :mod:`tempo.runtime.native`
(``cc -O3 -march=native``: its AVX-512 instructions) and loaded with
``ctypes``. Where it cannot be built (no C compiler, no AVX-512),
:func:`kernels` returns None and :func:`unavailable` says why: the products
then run with NumPy (:mod:`tempo.llm.quantized`).
"""
from __future__ import annotations

import ctypes
import os

from tempo.runtime import native

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quantized_kernels.c")
_P, _I = ctypes.c_void_p, ctypes.c_int64
SIGNATURES = {"int8_blocks": [_P, _P, _P, _P, _I, _I, _I, _I],
              "nibble_blocks": [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I]}

KERNELS = native.Kernels(SOURCE, SIGNATURES, "the quantised product kernels are", "products run with NumPy")
kernels = KERNELS.library  # the loaded library, built at the first call; None where it cannot be
unavailable = KERNELS.unavailable  # why kernels() is None

INT8_INPUTS_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "int8_input_kernels.c")
INT8_INPUTS_SIGNATURES = {"int8_blocks_int8_inputs": [_P, _P, _P, _P, _I, _I, _I, _I],
                          "nibble_blocks_int8_inputs": [_P, _P, _P, _P, _P, _I, _I, _I, _I]}
INT8_INPUTS = native.Kernels(INT8_INPUTS_SOURCE, INT8_INPUTS_SIGNATURES, "the 8-bit input kernels are",
                             "products with rounded inputs run with NumPy")
int8_input_kernels = INT8_INPUTS.library  # AVX-512 with VNNI; None where they cannot be built
