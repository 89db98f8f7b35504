"""The role API of GMI-DRL's Listing 1: write a routine, place instances, run them.

Three instances on two devices (layout ``2,1``). Every instance is a trainer:
it makes a "gradient" from its id, reduces it with the strategy Algorithm 1
picks for the layout (``collective``), and the first instance then sends the
result to the last one (``send``/``recv``), which checks it.

    .venv/bin/python examples/gmi_roles.py [--layout 2,1]
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tempo.gmi.instance import Program
from tempo.gmi.layout import Layout
from tempo.gmi.manager import GMIManager
from tempo.gmi.reduce import Reducer
from tempo.gmi.roles import Role
from tempo.gmi.strategy import select_strategy
from tempo.rl.training import parse_args


@dataclass
class Args:
    layout: str = "2,1"
    """instances per device"""


class SumAndForward(Role):
    """Reduce a per-instance tensor, then forward the sum from the first to the last instance."""

    def __init__(self, ctx, strategy: str):
        super().__init__(ctx)
        self.reduce = Reducer(strategy, ctx, ctx.spec.reduce_mpl)
        self.last = ctx.layout.world_size - 1

    def run(self) -> None:
        grad = torch.full((4,), float(self.gmi_id + 1))
        self.reduce(grad)                            # the layout-aware collective
        if self.gmi_id == 0 and self.last > 0:
            self.send(grad, self.last)
        if self.gmi_id == self.last and self.last > 0:
            received = torch.empty(4)
            self.recv(received, src=0)
            self.ctx.report(kind="sum", value=received.tolist())


def main() -> None:
    args = parse_args(Args, __doc__.split("\n\n")[0])

    layout = Layout.parse(args.layout)
    strategy = select_strategy(layout.mpl)
    program = Program(SumAndForward, ("trainer",), {"strategy": strategy})
    manager = GMIManager(layout, [program] * layout.world_size)
    print(f"layout {layout}: devices {[list(ids) for ids in layout.mpl]}, strategy {strategy}, "
          f"{manager.backend} backend")
    for event in manager.run():
        if event["kind"] == "sum":
            n = layout.world_size
            assert event["value"] == [n * (n + 1) / 2] * 4, event
            print(f"instance {event['gmi']} received {event['value']}: ok")


if __name__ == "__main__":
    main()
