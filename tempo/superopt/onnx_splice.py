"""Write an optimised region back into its model: only the rewritten subgraphs change.

An imported ONNX node is kept verbatim while every graph value it made (that
the region used) is still in the optimised graph; the others are deleted, and
the optimised graph's nodes that no kept node provides are written as new
ONNX nodes at the model's opset (:mod:`tempo.superopt.onnx_export`'s
emitters), named as the tensors they recompute where those names are free.
Pass-through nodes, names, opset imports, functions, metadata, initializers
and element types stay as they were; initializers and nodes that only the
deleted nodes read are dropped. A rewrite the model's opset cannot express
raises :class:`~tempo.superopt.onnx_export.Inexpressible`.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tempo.superopt.graph import Graph, Node
from tempo.superopt.onnx_export import EMITTERS, Writer
from tempo.superopt.onnx_import import Imported, used_names
from tempo.superopt.reference import KERNELS, leaf_value

# ONNX ops before opset 7 broadcast only with attributes the emitters do not write
MIN_OPSET = 7


def all_names(model: onnx.ModelProto) -> set[str]:
    """Every tensor and node name the model's main graph and subgraphs use."""
    names = {vi.name for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]}
    names |= {t.name for t in model.graph.initializer}
    for n in model.graph.node:
        names |= used_names(n) | set(n.output) | {n.name}
    return names


def _kept(imported: Imported, new: set[int]) -> set[int]:
    """Indices of the imported nodes whose values the optimised graph still has."""
    before = {id(n) for n in imported.graph.topo()}
    return {i for i, outs in imported.produced.items()
            if all(id(v) in new for _, v in outs if id(v) in before)}


class _Splicer:
    def __init__(self, imported: Imported, graph: Graph):
        model = imported.model
        self.imported, self.graph = imported, graph
        self.writer = Writer(imported.opset, all_names(model), "tempo_")
        self.const = graph.constant_ids()
        present = {id(n) for n in graph.topo()}
        self.kept = _kept(imported, present)
        self.names: dict[int, str] = {}
        originals = {t.name for t in model.graph.initializer} | {
            o for n in model.graph.node for o in n.output}
        for n in graph.topo():
            if n.op == "input" or (n.op == "weight" and n.attr("name") in originals):
                self.names[id(n)] = n.attr("name")
        for i in self.kept:
            for name, v in imported.produced[i]:
                self.names.setdefault(id(v), name)
        self.defined = set(self.names.values()) | {o for i in self.kept for o, _ in imported.produced[i]}

    def name_of(self, n: Node) -> str:
        if id(n) not in self.names:
            self.names[id(n)] = self._write(n)
        return self.names[id(n)]

    def _write(self, n: Node) -> str:
        origin = self.imported.origin.get(id(n))
        out = origin if origin and origin not in self.defined else self.writer.fresh(n.op)
        self.defined.add(out)
        if n.op in ("weight", "scalar") or id(n) in self.const:
            value = np.asarray(_fold(n, self.graph), np.float32)
            self.writer.inits.append(numpy_helper.from_array(value, out))
            return out
        self.writer.needs(MIN_OPSET, f"a rewritten {n.op}")
        ins = [self.name_of(s) for s in n.src]
        written = EMITTERS[n.op](self.writer, n, ins, out)
        if written != out:
            self.writer.emit("Identity", [written], out)
        return out

    def define(self, name: str, value: Node) -> None:
        """Make tensor ``name`` hold ``value`` unless something already writes it."""
        written = self.name_of(value)
        if name not in self.defined:
            self.writer.emit("Identity", [written], name)
            self.defined.add(name)


def _fold(n: Node, graph: Graph, memo: dict | None = None) -> np.ndarray:
    """The value of a node that reads only weights and scalars."""
    memo = {} if memo is None else memo
    if id(n) not in memo:
        memo[id(n)] = (leaf_value(n, {}, graph.weights) if not n.src else
                       KERNELS[n.op](dict(n.attrs), *(_fold(s, graph, memo) for s in n.src)))
    return memo[id(n)]


def splice(imported: Imported, graph: Graph) -> onnx.ModelProto:
    """``imported.model`` with its region replaced by ``graph`` where the two differ."""
    s = _Splicer(imported, graph)
    for value, name in zip(graph.outputs, graph.output_names):
        s.define(name, value)
    values = {name: v for outs in imported.produced.values() for name, v in outs}
    for i in sorted(s.kept):
        for name in used_names(imported.model.graph.node[i]):
            if name in values and name not in s.defined:
                s.define(name, values[name])
    model = onnx.ModelProto()
    model.CopyFrom(imported.model)
    deleted = set(imported.produced) - s.kept
    nodes = [n for i, n in enumerate(model.graph.node) if i not in deleted] + s.writer.nodes
    inits = [*model.graph.initializer, *s.writer.inits]
    nodes, inits = _prune(imported.model, nodes, inits)
    del model.graph.node[:], model.graph.initializer[:]
    model.graph.node.extend(_topological(nodes, model))
    model.graph.initializer.extend(inits)
    _keep_io_and_value_info(model, imported.model, s.writer.inits)
    return model


def _prune(original: onnx.ModelProto, nodes: list, inits: list) -> tuple[list, list]:
    """Drop the nodes and initializers that the original read but nothing reads any more."""
    outputs = {o.name for o in original.graph.output}
    before = set(outputs) | {i for n in original.graph.node for i in used_names(n)}
    while True:
        read = set(outputs) | {i for n in nodes for i in used_names(n)}
        dead = [n for n in nodes if not any(o in read for o in n.output)
                and any(o in before for o in n.output)]
        if not dead:
            break
        nodes = [n for n in nodes if all(n is not d for d in dead)]
    return nodes, [t for t in inits if t.name in read or t.name not in before]


def _topological(nodes: list, model: onnx.ModelProto) -> list:
    """``nodes`` in an order where each comes after the producers of what it reads, keeping the
    given order where it already is one."""
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    order, state = [], [0] * len(nodes)
    for root in range(len(nodes)):
        stack = [root]
        while stack:
            k = stack[-1]
            if state[k] == 2:
                stack.pop()
                continue
            if state[k] == 0:
                state[k] = 1
                stack.extend(producer[i] for i in sorted(used_names(nodes[k]), reverse=True)
                             if i in producer and state[producer[i]] == 0)
                continue
            state[k] = 2
            order.append(nodes[k])
            stack.pop()
    return order


def _keep_io_and_value_info(model: onnx.ModelProto, original: onnx.ModelProto,
                            new_inits: list) -> None:
    """Drop value_info of tensors no longer written and graph inputs that declared dropped
    initializers; before IR version 4, declare each new initializer as a graph input as that
    version requires."""
    written = {o for n in model.graph.node for o in n.output}
    inits = {t.name for t in model.graph.initializer}
    dropped = {t.name for t in original.graph.initializer} - inits
    kept = [vi for vi in model.graph.value_info if vi.name in written]
    inputs = [vi for vi in model.graph.input if vi.name not in dropped]
    del model.graph.value_info[:], model.graph.input[:]
    model.graph.value_info.extend(kept)
    model.graph.input.extend(inputs)
    if model.ir_version < 4:
        model.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                                 for t in new_inits if t.name in inits)
