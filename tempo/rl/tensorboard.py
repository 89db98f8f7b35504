"""TensorBoard event files of scalars, written without TensorBoard.

An event file is a sequence of records (TFRecord framing: the length as a
little-endian uint64, its masked CRC-32C, the payload, the payload's masked
CRC-32C); each payload is an ``Event`` protocol buffer: ``wall_time``
(field 1, double), ``step`` (2, int64), ``file_version`` (3, string) or a
``summary`` (5) holding ``Value``s of ``tag`` (1, string) and
``simple_value`` (2, float). That subset is all scalars need, and
TensorBoard reads it as it reads its own writer's files.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as root:
...     writer = SummaryWriter(f"{root}/runs/demo")
...     writer.add_scalar("charts/SPS", 1234.0, 10)
...     writer.close()
"""
from __future__ import annotations

import os
import socket
import struct
import time

_CRC_TABLE: list[int] = []


def _crc_table() -> list[int]:
    if not _CRC_TABLE:
        for byte in range(256):
            crc = byte
            for _ in range(8):
                crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
            _CRC_TABLE.append(crc)
    return _CRC_TABLE


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecord framing."""
    table, crc = _crc_table(), 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire) + payload


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _field(number, 2, _varint(len(payload)) + payload)


def event(wall_time: float, step: int = 0, file_version: str | None = None,
          scalars: dict[str, float] | None = None) -> bytes:
    """One serialised ``Event``: the file's version header, or scalars at ``step``."""
    body = _field(1, 1, struct.pack("<d", wall_time)) + _field(2, 0, _varint(step))
    if file_version is not None:
        body += _length_delimited(3, file_version.encode())
    if scalars:
        values = b"".join(_length_delimited(1, _length_delimited(1, tag.encode())
                                            + _field(2, 5, struct.pack("<f", value)))
                          for tag, value in scalars.items())
        body += _length_delimited(5, values)
    return body


def record(payload: bytes) -> bytes:
    """``payload`` in TFRecord framing."""
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload))


class SummaryWriter:
    """Scalars into ``logdir/events.out.tfevents.<time>.<host>``, as ``torch.utils.tensorboard``'s writer.

    Records are flushed as they are added, so a run that stops early keeps
    what it logged.
    """

    def __init__(self, logdir: str) -> None:
        os.makedirs(logdir, exist_ok=True)
        self.path = os.path.join(logdir, f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}")
        self._file = open(self.path, "wb")
        self._write(event(time.time(), file_version="brain.Event:2"))

    def add_scalar(self, tag: str, value: float, global_step: int) -> None:
        """Log ``value`` under ``tag`` (e.g. ``charts/episodic_return``) at ``global_step``."""
        self._write(event(time.time(), int(global_step), scalars={tag: float(value)}))

    def close(self) -> None:
        self._file.close()

    def _write(self, payload: bytes) -> None:
        self._file.write(record(payload))
        self._file.flush()
