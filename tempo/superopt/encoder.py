"""The graph encoder of X-RLflow §3.4, with torch_geometric.

1. Edge-to-node update (Eq. 6): ``h_i' = relu(W [sum of incoming edge features || h_i])``.
2. ``k`` graph-attention layers (Eq. 7, :class:`torch_geometric.nn.GATConv`).
3. Global update (Eq. 8): ``g' = relu(W [sum_i h_i || g])`` with ``g`` initialised to 0.

Policy and value heads read the graph embeddings: each candidate graph (and
the current graph, for the stop action) gets a logit from the policy MLP,
which also reads a learned embedding of the rule that made the candidate (a
separate entry stands for "stop"); the value MLP reads the current graph's
embedding with the candidates' mean.
"""
from __future__ import annotations

import torch
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GATConv, global_add_pool
from torch_geometric.utils import scatter

from gymnasium.spaces import GraphInstance


def to_data(g: GraphInstance) -> Data:
    """A torch_geometric graph from an environment graph observation."""
    return Data(x=torch.as_tensor(g.nodes), edge_index=torch.as_tensor(g.edge_links).T.contiguous(),
                edge_attr=torch.as_tensor(g.edges))


class GraphEncoder(nn.Module):
    """Edge-to-node update, k GAT layers, global update: one embedding per graph."""

    def __init__(self, node_dim: int, edge_dim: int, hidden: int = 64, gat_layers: int = 5,
                 heads: int = 2):
        super().__init__()
        self.edge_to_node = nn.Linear(edge_dim + node_dim, hidden)
        self.gats = nn.ModuleList(GATConv(hidden, hidden, heads=heads, concat=False)
                                  for _ in range(gat_layers))
        self.hidden = hidden
        self.global_update = nn.Linear(2 * hidden, hidden)

    def forward(self, batch: Batch) -> torch.Tensor:
        """[number of graphs, hidden] embeddings."""
        incoming = scatter(batch.edge_attr, batch.edge_index[1], dim=0, dim_size=batch.num_nodes,
                           reduce="sum")
        h = torch.relu(self.edge_to_node(torch.cat([incoming, batch.x], dim=-1)))
        for gat in self.gats:
            h = torch.relu(gat(h, batch.edge_index))
        pooled = global_add_pool(h, batch.batch, size=batch.num_graphs)
        g0 = pooled.new_zeros(batch.num_graphs, self.hidden)
        return torch.relu(self.global_update(torch.cat([pooled, g0], dim=-1)))


def _mlp(inp: int, sizes: tuple[int, ...], out: int) -> nn.Sequential:
    layers, last = [], inp
    for s in sizes:
        layers += [nn.Linear(last, s), nn.Tanh()]
        last = s
    return nn.Sequential(*layers, nn.Linear(last, out))


class PolicyValue(nn.Module):
    """Masked action logits over [stop, candidate 1..K] and a state value."""

    def __init__(self, node_dim: int, edge_dim: int, max_candidates: int, num_rules: int,
                 hidden: int = 64, gat_layers: int = 5, head: tuple[int, ...] = (256, 64),
                 rule_dim: int = 16):
        super().__init__()
        self.max_candidates = max_candidates
        self.encoder = GraphEncoder(node_dim, edge_dim, hidden, gat_layers)
        self.rule_embedding = nn.Embedding(num_rules + 1, rule_dim)   # the last entry: stop
        self.policy = _mlp(2 * hidden + rule_dim, head, 1)
        self.value = _mlp(2 * hidden, head, 1)

    def forward(self, states: list[tuple[Data, list[Data], torch.Tensor]]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [S, K+1] (masked entries -1e9) and values [S] for a list of states.

        A state is the current graph, the candidate graphs and the rule index of
        each action (stop first).
        """
        graphs, spans = [], []
        for current, cands, _ in states:
            spans.append((len(graphs), len(cands)))
            graphs.extend([current, *cands])
        emb = self.encoder(Batch.from_data_list(graphs))
        logits = emb.new_full((len(states), self.max_candidates + 1), -1e9)
        values = []
        for s, (start, n) in enumerate(spans):
            cur = emb[start].expand(n + 1, -1)
            options = emb[start:start + n + 1]          # the stop action scores the current graph
            made_by = self.rule_embedding(states[s][2][: n + 1])
            logits[s, : n + 1] = self.policy(torch.cat([cur, options, made_by], dim=-1)).squeeze(-1)
            context = emb[start + 1:start + n + 1].mean(0) if n else emb[start]
            values.append(self.value(torch.cat([emb[start], context])).squeeze(-1))
        return logits, torch.stack(values)
