"""Instance layouts: how many GMI instances sit on each device.

A layout is written ``DxN`` (D devices, N instances each) or as a comma list
of instances per device (``3,2,2``) for uneven layouts. Instances are numbered
device by device, so ``3,2,2`` gives the GMI-to-device mapping list (the
paper's ``MPL``) ``[[0, 1, 2], [3, 4], [5, 6]]``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from tempo.gmi.errors import GMIError

_UNIFORM = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")
_LIST = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*$")


@dataclass(frozen=True)
class Layout:
    """Instances per device, in device order."""

    per_device: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.per_device or any(n < 1 for n in self.per_device):
            raise GMIError(f"a layout needs at least one device and one instance per device, "
                           f"got {list(self.per_device)}")

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """Read ``DxN`` or ``n0,n1,...``; a :class:`GMIError` names a bad spelling."""
        uniform = _UNIFORM.match(text)
        if uniform:
            devices, per = int(uniform.group(1)), int(uniform.group(2))
            if devices < 1 or per < 1:
                raise GMIError(f"layout {text!r}: devices and instances per device must be >= 1")
            return cls((per,) * devices)
        if _LIST.match(text):
            counts = tuple(int(part) for part in text.split(","))
            if any(n < 1 for n in counts):
                raise GMIError(f"layout {text!r}: every device needs at least one instance")
            return cls(counts)
        raise GMIError(f"layout {text!r} is not 'DxN' (e.g. 2x3) or a comma list of "
                       f"instances per device (e.g. 3,2,2)")

    @property
    def num_devices(self) -> int:
        return len(self.per_device)

    @property
    def world_size(self) -> int:
        return sum(self.per_device)

    @property
    def uniform(self) -> bool:
        return len(set(self.per_device)) == 1

    @cached_property
    def mpl(self) -> tuple[tuple[int, ...], ...]:
        """The GMI-to-device mapping list: ``mpl[d]`` are the instance ids on device ``d``."""
        groups, start = [], 0
        for count in self.per_device:
            groups.append(tuple(range(start, start + count)))
            start += count
        return tuple(groups)

    def device_of(self, gmi_id: int) -> int:
        """The device instance ``gmi_id`` sits on."""
        for device, ids in enumerate(self.mpl):
            if gmi_id in ids:
                return device
        raise GMIError(f"instance {gmi_id} is not in layout {self}")

    def local_index(self, gmi_id: int) -> int:
        """Position of ``gmi_id`` among the instances of its device."""
        return self.mpl[self.device_of(gmi_id)].index(gmi_id)

    def __str__(self) -> str:
        if self.uniform:
            return f"{self.num_devices}x{self.per_device[0]}"
        return ",".join(str(n) for n in self.per_device)
