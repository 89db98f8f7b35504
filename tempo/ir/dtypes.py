"""Tempo's dtypes: the one place a user's dtype spelling becomes a dtype name.

A dtype is given as a name (``"float32"``), a short alias (``"f32"``,
``"fp32"``), a NumPy dtype or a NumPy scalar type (``np.float32``). Every
other spelling is a :class:`~tempo.errors.ShapeError`; ``"float"`` and
``"int"`` in particular, since NumPy reads them as 64-bit while most deep
learning code means 32.
"""
from __future__ import annotations

import numpy as np

from tempo.errors import ShapeError, Site

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")

ALIASES = {
    "f16": "float16", "fp16": "float16", "half": "float16",
    "f32": "float32", "fp32": "float32",
    "f64": "float64", "fp64": "float64", "double": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
}

_AMBIGUOUS = {"float": "'float32' or 'float64'", "int": "'int32' or 'int64'", "uint": "'uint32' or 'uint64'"}


def accepted() -> str:
    """The accepted spellings, as one line for error messages and docs."""
    names = []
    for name in DTYPES:
        aliases = [a for a, n in ALIASES.items() if n == name]
        names.append(f"{name} ({', '.join(aliases)})" if aliases else name)
    return f"{', '.join(names)}, or a NumPy dtype or scalar type such as np.float32"


def dtype_name(dtype, site: Site | None = None) -> str:
    """The canonical name (one of :data:`DTYPES`) of ``dtype``, or a ShapeError naming what is accepted."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, (np.generic, bool))):
        name = np.dtype(dtype).name
        if name in DTYPES:
            return name
        raise ShapeError(f"dtype {name} is not one of Tempo's dtypes: {accepted()}", site)
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    if isinstance(dtype, str) and dtype in ALIASES:
        return ALIASES[dtype]
    given = dtype.__name__ if isinstance(dtype, type) else repr(dtype)
    key = dtype.__name__ if dtype in (float, int) else dtype if isinstance(dtype, str) else None
    if key in _AMBIGUOUS:
        raise ShapeError(f"dtype {given} is ambiguous: use {_AMBIGUOUS[key]}; accepted: {accepted()}", site)
    raise ShapeError(f"unknown dtype {given}; accepted: {accepted()}", site)
