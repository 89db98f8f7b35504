"""A fused island on the NumPy backend as one generated straight-line Python function.

The island's steps become consecutive statements over local variables: each
step calls its kernel with its arguments spelled out, binds the outputs that
a later step or the island reads, checks each one's dtype against the
step's (casting only where they differ), and deletes every value after its
last reader, so intermediates are freed as early as in a step-by-step walk.
A step whose op is one function of its inputs (an elementwise ufunc, a
matrix product) calls that function directly, without the kernel's
argument list and result tuple. There is no per-step list building, zipping
or dispatch left at run time: on a CleanRL-size PPO that walk cost about a
quarter of the learner's time.

A linear layer on a batch of vectors, ``squeeze(unsqueeze(x) @ w)``, is one
line calling the product on ``x`` itself: a third of an acting step's cost
on CleanRL's PPO, with the same numbers. A linear layer through weight panels
(:mod:`tempo.transforms.pack_weights`: ``reshape(permute(unsqueeze(x) @
panels))``, each of a decoding step's weight products) is one line calling the
native kernel that writes the product in its final layout
(:class:`~tempo.runtime.backends.skinny_products.RowsByPanels`), the same
numbers as the four steps. Layout steps whose shape or index is a constant
(reshape, expand, basic indexing) and permutes are plain calls too, without
the kernel's argument list.

A decoding step's softmax attention (its scores against its keys, the
prompt's scores, one softmax over both, the products with the values; about
16 steps, each a NumPy pass over the scores of every head of every sequence)
is one line calling one native kernel for every (sequence, head) pair
(:func:`~tempo.runtime.backends.numpy_attention.step`), the same numbers to
float32 rounding; where the kernel does not take the arrays, the line runs
the steps' own calls.

With ``rows`` (``NumPyBackend(row_programs=True)``, as ``tpo.llm`` decodes),
each group of float32 elementwise steps and last-axis reductions over rows of
one shape (a norm, the rotary embedding's products, SwiGLU) is one line
calling one native row program for all of them
(:mod:`~tempo.runtime.backends.numpy_rows`), binding every value of the group
that a later line reads: the same numbers to float32 rounding.

A failing step raises :class:`StepFailed` with its op's name and site,
found from the line of the island that raised (a row program's line: its
last step's).
"""
from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from tempo.ir import ops
from tempo.runtime.backends import numpy_attention, numpy_rows, skinny_products
from tempo.runtime.backends.base import Kernel, StepFailed


def compile_island(op: ops.FusedOp, kernel_of: Callable[[ops.Op], Kernel],
                   call_of: Callable[[ops.Op], Callable | None] = lambda op: None, rows: bool = False) -> Kernel:
    """The island ``op`` as one function ``(inputs, env, point) -> outputs``; ``kernel_of`` gives each step's
    kernel, ``call_of`` a plain function of the step's inputs to its one output (a ufunc), called directly
    instead of the kernel where it gives one. ``rows``: chains of float32 elementwise steps run as row
    programs (:mod:`.numpy_rows`; the same numbers to float32 rounding)."""
    steps = op.steps
    found = {**_vector_products(op, call_of), **_panel_products(op, call_of), **_attention_steps(op, call_of)}
    chains = {s: (chain, fn, reads, None) for s, (chain, fn, reads) in found.items()}  # None: one value
    if rows:
        skipped = {s for chain, _, _, _ in chains.values() for s in chain}
        chains.update(numpy_rows.chains(op, call_of, skipped | set(chains), skipped))
    skipped = {s for chain, _, _, _ in chains.values() for s in chain}
    reads = [() if s in skipped else chains[s][2] if s in chains else step.inputs
             for s, step in enumerate(steps)]  # what each line reads
    used = {(j, k) for inputs in reads for j, k in inputs if j >= 0} | set(op.outputs)
    last_use = {(j, k): s for s, inputs in enumerate(reads) for j, k in inputs if j >= 0}
    kept = set(op.outputs)
    dying: dict[int, list[str]] = {}  # step -> the values it reads last, deleted after it
    for (j, k), last in last_use.items():
        if (j, k) not in kept:
            dying.setdefault(last, []).append(f"v{j}_{k}")
    scope = {"ndarray": np.ndarray, "StepFailed": StepFailed, "cast": cast, "steps": steps}
    lines, step_of_line = ["def island(inputs, env, point):", "    try:"], [None, None]
    for s, step in enumerate(steps):
        if s in skipped:
            continue
        args = ", ".join(f"inputs[{k}]" if j < 0 else f"v{j}_{k}" for j, k in reads[s])
        if s in chains and chains[s][3] is not None:  # a row program's line: float32 arrays, or the steps' casts
            scope[f"f{s}"], bound = chains[s][1], ", ".join(f"v{j}_{k}" for j, k in chains[s][3])
            body = [f"        {bound}, = f{s}({args})"] + (["        del " + ", ".join(dying[s])] if s in dying else [])
            lines += body
            step_of_line += [s] * len(body)
            continue
        call = chains[s][1] if s in chains else call_of(step.op) if len(step.dtypes) == 1 else None
        if call is None:
            scope[f"k{s}"] = kernel_of(step.op)
            body = [f"        r = k{s}([{args}], env, point)"]
            results, dead = [f"r[{k}]" for k in range(len(step.dtypes))], ["r"]
        else:
            scope[f"f{s}"] = call
            body, results, dead = [], [f"f{s}({args})"], []
        for k, dtype in enumerate(step.dtypes):
            if (s, k) not in used:
                continue
            name, want = f"v{s}_{k}", _dtype(dtype)
            scope[f"d{s}_{k}"], scope[f"t{s}_{k}"] = want, dtype
            body.append(f"        {name} = {results[k]}")
            if want is None:
                body.append(f"        {name} = cast({name}, t{s}_{k})")
            else:
                body += [f"        if {name}.__class__ is not ndarray or {name}.dtype is not d{s}_{k}:",
                         f"            {name} = cast({name}, t{s}_{k})"]
        if not body:  # an unread single output: the call still runs (it may fail)
            body.append(f"        {results[0]}")
        dead += dying.get(s, [])
        if dead:
            body.append("        del " + ", ".join(dead))
        lines += body
        step_of_line += [s] * len(body)
    lines += ["    except Exception as err:",
              "        s = step_of_line[err.__traceback__.tb_lineno - 1]",
              "        raise StepFailed(steps[s].op.name, steps[s].site, err) from err",
              "    return (" + "".join(f"v{j}_{k}, " for j, k in op.outputs) + ")"]
    scope["step_of_line"] = step_of_line
    name = f"<numpy island {next(_ISLANDS)}: {len(steps)} steps>"  # its own name in tracebacks and profiles
    exec(compile("\n".join(lines), name, "exec"), scope)
    return scope["island"]


def _readers(op: ops.FusedOp) -> dict[tuple[int, int], list[int]]:
    readers = {}
    for s, step in enumerate(op.steps):
        for j, k in step.inputs:
            readers.setdefault((j, k), []).append(s)
    return readers


def _product_chain(op: ops.FusedOp, s: int, kinds: tuple, call_of, readers) -> tuple[int, ...] | None:
    """The steps ``(u, m, ..., s)`` of a chain that ends at step ``s``: ``u`` an unsqueeze read by the
    matrix product ``m`` alone (as its left side), then steps of the op types ``kinds`` (the last one
    ``s``'s), each reading the one before, which no other step reads and the island does not expose,
    all of one dtype and each one plain function of its inputs (``call_of``); None where ``s`` ends none."""
    steps, chain = op.steps, [s]
    for kind in reversed(kinds):
        step = steps[chain[0]]
        if not isinstance(step.op, kind) or step.inputs[0][0] < 0:
            return None
        chain.insert(0, step.inputs[0][0])
    m = chain[0]
    if (not isinstance(steps[m].op, ops.MatMulOp) or steps[m].inputs[0][0] < 0
            or steps[m].op.ordered_rows or steps[m].op.ordered_inner):  # a product in step order keeps its kernel
        return None
    u = steps[m].inputs[0][0]
    if not isinstance(steps[u].op, ops.UnsqueezeOp):
        return None
    chain.insert(0, u)
    if (any(readers[(j, 0)] != [k] for j, k in zip(chain, chain[1:])) or {(j, 0) for j in chain[:-1]} & set(op.outputs)
            or any(steps[j].dtypes != steps[s].dtypes for j in chain) or len(steps[s].dtypes) != 1
            or not all(call_of(steps[j].op) for j in chain)):
        return None
    return tuple(chain)


def _vector_products(op: ops.FusedOp, call_of) -> dict[int, tuple[tuple[int, ...], Callable]]:
    """The steps ``s`` that squeeze a matrix product ``m`` whose left side is step ``u``, an unsqueeze (a
    linear layer on a batch of vectors: ``(x[..., None, :] @ w)[..., 0, :]``), as
    :func:`_product_chain` finds them: ``{s: ((u, m), the line's function, what it reads)}`` (their
    axes are checked at run time, :func:`_vector_product`)."""
    steps, readers, found = op.steps, _readers(op), {}
    for s in range(len(steps)):
        chain = _product_chain(op, s, (ops.SqueezeOp,), call_of, readers)
        if chain:
            u, m, _ = chain
            found[s] = ((u, m), _vector_product(call_of(steps[u].op), call_of(steps[m].op), call_of(steps[s].op),
                                                steps[u].op.axis, steps[s].op.axis, _dtype(steps[u].dtypes[0])),
                        (steps[u].inputs[0], steps[m].inputs[1]))
    return found


def _panel_products(op: ops.FusedOp, call_of) -> dict[int, tuple[tuple[int, ...], Callable]]:
    """The steps ``s`` that end a linear layer through weight panels
    (:mod:`tempo.transforms.pack_weights`): ``x`` (rows, k) unsqueezed at its first axis (``u``), times
    the panels (count, k, width) (``m``), permuted to (rows, count, width) (``p``) and reshaped to
    (rows, count * width) (``s``), as :func:`_product_chain` finds them: ``{s: ((u, m, p), the line's
    function, what it reads)}``. The function is the native kernel that writes the product in its final layout
    (:class:`~tempo.runtime.backends.skinny_products.RowsByPanels`), where it applies at run time."""
    steps, readers, found = op.steps, _readers(op), {}
    for s in range(len(steps)):
        chain = _product_chain(op, s, (ops.PermuteOp, ops.ReshapeOp), call_of, readers)
        if (chain and steps[chain[0]].op.axis == 0 and steps[chain[2]].op.axes == (1, 0, 2)
                and len(steps[s].op.shape) == 2 and _dtype(steps[s].dtypes[0]) == np.float32):
            found[s] = (chain[:-1], _panel_product(*(call_of(steps[j].op) for j in chain), steps[s].op.shape),
                        (steps[chain[0]].inputs[0], steps[chain[1]].inputs[1]))
    return found


def _attention_steps(op: ops.FusedOp, call_of) -> dict[int, tuple[tuple[int, ...], Callable, tuple]]:
    """The steps ``d`` that end a decoding step's softmax attention over parts of keys and values (the
    step's own and the prompt's, ``tempo.llm.program.attend``)::

        top = maximum over the parts of max(scores_i, axis=-1, keepdims=True)
        w_i = exp(scores_i - top)
        d = (w_1 @ values_1 + ...) / (sum(w_1, axis=-1, keepdims=True) + ...)

    where at least one part's scores are ``permute(keys @ qt, (0, 1, 3, 2)) * scale`` for the
    transposed queries ``qt`` (batch, kv heads, head_dim, groups), and the others' are given (a
    part's max or sum over an axis of one position may be left out: the value itself). ``top`` only
    shifts the exponentials, which the result does not depend on: a part's max computed elsewhere
    (another island's) is read for the steps' own calls, and the kernel shifts by the largest score
    itself. As
    :func:`_softmax_attention` finds them: ``{d: (the other steps, the line's function, what it
    reads)}``. The function is one native call for every (sequence, head) pair
    (:func:`~tempo.runtime.backends.numpy_attention.step`) where it applies at run time, the steps'
    own calls otherwise."""
    steps, readers, found = op.steps, _readers(op), {}
    for d in range(len(steps)):
        match = _softmax_attention(steps, d)
        if match is None:
            continue
        chain, parts, reads = match
        if ((chain & {j for j, _ in op.outputs}) or any(j in chain and not set(r) <= chain | {d}
                                                         for (j, _), r in readers.items())
                or any(steps[j].dtypes != ("float32",) for j in chain | {d})
                or not all(call_of(steps[j].op) for j in chain | {d})):
            continue
        order = tuple(sorted(chain)) + (d,)
        found[d] = (order[:-1], _attention_line(steps, order, parts, reads, call_of), reads)
    return found


def _softmax_attention(steps, d: int) -> tuple[set, tuple, tuple] | None:
    """For the attention :func:`_attention_steps` describes that ends at step ``d``: its other steps,
    its parts (per part: ``"keys"``, read as its keys, values and scale; ``"scores"``, read as its
    scores and values; ``"one"``, the same with its max or sum left out) and what its line reads
    (``qt``, then the parts'); None where ``d`` ends none."""
    def step(ref, kind, fn=None):
        j, k = ref
        if j < 0 or k or not isinstance(steps[j].op, kind) or (fn is not None and steps[j].op.fn != fn):
            return None
        return steps[j]

    def leaves(ref, fn, tree):
        """The operands of the tree of ``fn`` (add, maximum) at ``ref``, its steps added to ``tree``."""
        node = step(ref, ops.ElementwiseOp, fn)
        if node is None or len(node.inputs) != 2:
            return [ref]
        tree.add(ref[0])
        return leaves(node.inputs[0], fn, tree) + leaves(node.inputs[1], fn, tree)

    def last_axis(ref, fn):
        """The input a reduction ``fn`` over the last axis (kept) at ``ref`` reads, else ``ref``."""
        node = step(ref, ops.ReduceOp, fn)
        if node is not None and node.op.keepdims and not node.op.ordered and node.op.axes in ((-1,), (3,)):
            chain.add(ref[0])
            return node.inputs[0], False
        return ref, True

    div = step((d, 0), ops.ElementwiseOp, "div")
    if div is None or len(div.inputs) != 2:
        return None
    chain: set[int] = set()
    products, totals = leaves(div.inputs[0], "add", chain), leaves(div.inputs[1], "add", chain)
    values = {}  # the weights of each part (an exp) -> its values
    for ref in products:
        product = step(ref, ops.MatMulOp)
        if product is None or product.op.ordered_rows or product.op.ordered_inner or product.inputs[0] in values:
            return None
        values[product.inputs[0]] = product.inputs[1]
        chain.add(ref[0])
    summed = dict(last_axis(ref, "sum") for ref in totals)  # weights -> whether their sum is left out
    if set(summed) != set(values) or len(summed) != len(totals) or len(values) > numpy_attention.MAX_PARTS:
        return None
    scores, top = {}, None  # scores -> weights
    for ref in values:
        exp = step(ref, ops.ElementwiseOp, "exp")
        sub = exp and step(exp.inputs[0], ops.ElementwiseOp, "sub")
        if sub is None or top not in (None, sub.inputs[1]) or sub.inputs[0] in scores:
            return None
        top = sub.inputs[1]
        scores[sub.inputs[0]] = ref
        chain |= {ref[0], exp.inputs[0][0]}
    peaks = [last_axis(ref, "max") for ref in leaves(top, "maximum", chain)]
    if any(not left_out and ref not in scores for ref, left_out in peaks):
        return None
    whole = {ref for ref, left_out in peaks if left_out and ref in scores}  # scores that are their own max
    others = [ref for ref, left_out in peaks if left_out and ref not in scores]  # a max computed elsewhere
    qt, kinds, reads = None, [], []
    for ref, weights in scores.items():
        one = ref in whole or summed[weights]
        scaled = None if one else step(ref, ops.ElementwiseOp, "mul")
        side = scaled and next((k for k in (0, 1) if (p := step(scaled.inputs[k], ops.PermuteOp)) is not None
                                and p.op.axes == (0, 1, 3, 2)), None)
        product = side is not None and step(step(scaled.inputs[side], ops.PermuteOp).inputs[0], ops.MatMulOp)
        if (not product or product.op.ordered_rows or product.op.ordered_inner
                or qt not in (None, product.inputs[1])):
            kinds.append("one" if one else "scores")
            reads += [ref, values[weights]]
            continue
        qt = product.inputs[1]
        chain |= {ref[0], scaled.inputs[side][0], steps[scaled.inputs[side][0]].inputs[0][0]}
        kinds.append("keys")
        reads += [product.inputs[0], values[weights], scaled.inputs[1 - side]]
    if qt is None:
        return None
    return chain, tuple(kinds) + ("shift",) * len(others), (qt, *reads, *others)


def _attention_line(steps, order: tuple, kinds: tuple, reads: tuple, call_of) -> Callable:
    """The function of the attention line :func:`_attention_steps` finds (``kinds``, ``reads``: its
    parts and what it reads, :func:`_softmax_attention`): the native kernel where it applies, else the
    steps ``order`` (the line's last one the result) run one after the other with their own calls,
    each value of its step's dtype."""
    calls = [(j, call_of(steps[j].op), steps[j].inputs, np.dtype(steps[j].dtypes[0]), steps[j].dtypes[0])
             for j in order]
    at = {ref: k for k, ref in enumerate(reads)}

    def by_steps(*args):
        values = {ref: args[k] for ref, k in at.items()}
        for j, fn, inputs, want, name in calls:
            value = fn(*(values[ref] for ref in inputs))
            if value.__class__ is not np.ndarray or value.dtype != want:
                value = cast(value, name)
            values[(j, 0)] = value
        return values[(order[-1], 0)]

    def attention(qt, *args):
        parts, scales, k = [], [], 0
        for kind in kinds:
            if kind == "keys":
                parts.append((None, args[k], args[k + 1]))
                scales.append(args[k + 2])
                k += 3
            elif kind == "shift":
                if getattr(args[k], "shape", (None,))[-1:] != (1,):
                    return by_steps(qt, *args)
                k += 1
            else:
                if kind == "one" and getattr(args[k], "shape", (None,))[-1:] != (1,):
                    return by_steps(qt, *args)
                parts.append((args[k], None, args[k + 1]))
                k += 2
        scale = _scalar(scales)
        if scale is not None and qt.__class__ is np.ndarray and qt.ndim == 4:
            out = numpy_attention.step(qt.transpose(0, 1, 3, 2), parts, scale)
            if out is not None:
                return out
        return by_steps(qt, *args)

    return attention


def _scalar(values) -> float | None:
    """The one number every value of ``values`` holds (each a number or a float32 array of one
    element), else None."""
    numbers = set()
    for value in values:
        if isinstance(value, np.ndarray):
            if value.size != 1 or value.dtype != np.float32:
                return None
            value = value.reshape(())[()]
        elif not isinstance(value, (float, int, np.floating)):
            return None
        numbers.add(float(np.float32(value)))
    return numbers.pop() if len(numbers) == 1 else None


def _panel_product(unsqueeze: Callable, matmul: Callable, permute: Callable, reshape: Callable,
                   shape: tuple) -> Callable:
    """``reshape(permute(matmul(unsqueeze(x), w)))`` (a reshape to ``shape``) by the native kernel where
    it applies (the same numbers: the kernel is the backend's product of a few rows by panels)."""
    kernel = skinny_products.RowsByPanels(tuple(shape))

    def product(x, w):
        out = kernel(x, w)
        if out is None:
            return reshape(permute(matmul(unsqueeze(x), w)))
        return out

    return product


def _vector_product(unsqueeze: Callable, matmul: Callable, squeeze: Callable, before: int, after: int, dtype):
    """``squeeze(matmul(unsqueeze(x), w))`` as ``matmul(x, w)`` where that is the same product: ``w`` a
    matrix, ``x`` a batch of rows of ``dtype`` whose unsqueeze and squeeze are at its last axis but one.
    The NumPy backend's product then makes the very same BLAS call (it multiplies a stack of rows by a
    matrix as one 2-D product), without the two views and the stack's reshapes around it."""

    def product(x, w):
        if (x.__class__ is np.ndarray and w.__class__ is np.ndarray and w.ndim == 2 and x.ndim >= 2
                and x.dtype is dtype and w.dtype is dtype and before in (-2, x.ndim - 1) and after in (-2, x.ndim - 1)):
            return matmul(x, w)
        return squeeze(matmul(unsqueeze(x), w))

    return product


def cast(tensor, dtype: str):
    """``tensor`` as an ndarray of ``dtype`` (a copy only where the dtype differs)."""
    tensor = np.asarray(tensor)
    want = _DTYPES.get(dtype) or _DTYPES.setdefault(dtype, np.dtype(dtype))  # a dtype compares faster than a name
    return tensor if tensor.dtype == want else tensor.astype(want)


_DTYPES: dict[str, np.dtype] = {}
_ISLANDS = itertools.count()


def _dtype(name: str):
    try:
        return np.dtype(name)
    except TypeError:
        return None
