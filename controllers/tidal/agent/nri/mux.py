# SPDX-License-Identifier: Apache-2.0
"""NRI's connection multiplexing (``github.com/containerd/nri/pkg/net/multiplex``).

One socket (the trunk) carries several logical byte streams. Every frame is an 8-byte header,
big-endian ``uint32`` connection id and ``uint32`` payload length, then the payload. A write
larger than :data:`MAX_PAYLOAD` is split into several frames; the reader sees a byte stream per
connection and must not assume frame boundaries. NRI uses two connections: on
:data:`PLUGIN_SERVICE_CONN` the runtime calls the plugin, on :data:`RUNTIME_SERVICE_CONN` the
plugin calls the runtime. Frames for a connection nobody opened are dropped (as NRI does).
"""
from __future__ import annotations

import asyncio
import struct

__all__ = ["HEADER", "MAX_PAYLOAD", "PLUGIN_SERVICE_CONN", "RUNTIME_SERVICE_CONN",
           "FrameDecoder", "FrameError", "Mux", "encode_frames"]

HEADER = struct.Struct(">II")
PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2
#: A ttrpc header plus the largest ttrpc message (NRI's maxPayloadSize).
MAX_PAYLOAD = 10 + (4 << 20)


class FrameError(ValueError):
    """The trunk carries something that is not a multiplexed frame."""


def encode_frames(conn_id: int, data: bytes) -> bytes:
    """The frames that carry ``data`` on connection ``conn_id``."""
    if conn_id <= 0:
        raise ValueError(f"connection id {conn_id}: must be ≥ 1 (0 is reserved)")
    if not data:
        return HEADER.pack(conn_id, 0)
    out = bytearray()
    for start in range(0, len(data), MAX_PAYLOAD):
        chunk = data[start:start + MAX_PAYLOAD]
        out += HEADER.pack(conn_id, len(chunk))
        out += chunk
    return bytes(out)


class FrameDecoder:
    """Incremental decoder: feed trunk bytes, get (connection id, payload) frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        frames = []
        while len(self._buf) >= HEADER.size:
            conn_id, size = HEADER.unpack_from(self._buf)
            if size > MAX_PAYLOAD:
                raise FrameError(f"connection {conn_id}: frame payload {size} bytes, maximum is {MAX_PAYLOAD}")
            if len(self._buf) < HEADER.size + size:
                break
            frames.append((conn_id, bytes(self._buf[HEADER.size:HEADER.size + size])))
            del self._buf[:HEADER.size + size]
        return frames


class Mux:
    """The plugin's end of a multiplexed trunk (an asyncio stream pair)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._conns: dict[int, asyncio.StreamReader] = {}
        self.error: BaseException | None = None

    def open(self, conn_id: int) -> asyncio.StreamReader:
        """The byte stream the peer sends on ``conn_id``."""
        if conn_id <= 0:
            raise ValueError(f"connection id {conn_id}: must be ≥ 1 (0 is reserved)")
        return self._conns.setdefault(conn_id, asyncio.StreamReader(limit=2 * MAX_PAYLOAD))

    def send(self, conn_id: int, data: bytes) -> None:
        """Queue ``data`` on ``conn_id``; one call's frames are never interleaved with another's."""
        if self._writer.is_closing():
            raise ConnectionResetError("NRI connection closed")
        self._writer.write(encode_frames(conn_id, data))

    async def run(self) -> None:
        """Demultiplex until the trunk closes; then every connection sees end of stream."""
        try:
            while True:
                header = await self._reader.readexactly(HEADER.size)
                conn_id, size = HEADER.unpack(header)
                if size > MAX_PAYLOAD:
                    raise FrameError(f"connection {conn_id}: frame payload {size} bytes, maximum is {MAX_PAYLOAD}")
                payload = await self._reader.readexactly(size) if size else b""
                conn = self._conns.get(conn_id)
                if conn is not None and payload:
                    conn.feed_data(payload)
        except asyncio.IncompleteReadError:
            pass
        except (OSError, FrameError) as err:
            self.error = err
        finally:
            for conn in self._conns.values():
                conn.feed_eof()
            self.close()

    def close(self) -> None:
        if not self._writer.is_closing():
            self._writer.close()
