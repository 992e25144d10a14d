# SPDX-License-Identifier: Apache-2.0
"""ttrpc, containerd's lightweight RPC, over one byte stream (``github.com/containerd/ttrpc``).

A message is a 10-byte header, big-endian ``uint32`` payload length, ``uint32`` stream id,
``uint8`` type (1 request, 2 response, 3 data) and ``uint8`` flags, then the payload: a
protobuf ``Request`` (service, method, payload, timeout) or ``Response`` (status, payload).
A client opens a stream per call with an odd id that only grows (1, 3, 5, …); the response
comes on the same stream. Only unary calls are implemented: NRI uses nothing else.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from tidal.tasks import within

from .api import ttrpc_pb2

__all__ = ["HEADER", "MAX_MESSAGE", "MSG_REQUEST", "MSG_RESPONSE", "MSG_DATA",
           "Client", "Handler", "Server", "TTRPCError", "ProtocolError", "Code",
           "encode_message", "read_message"]

log = logging.getLogger(__name__)

HEADER = struct.Struct(">IIBB")
MAX_MESSAGE = 4 << 20
MSG_REQUEST, MSG_RESPONSE, MSG_DATA = 1, 2, 3


class Code:
    """The gRPC status codes ttrpc uses."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class ProtocolError(ValueError):
    """The peer sent bytes that are not ttrpc."""


class TTRPCError(Exception):
    """A call answered with a non-OK status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ttrpc status {code}: {message}")
        self.code = code
        self.message = message


def encode_message(stream_id: int, msg_type: int, payload: bytes, flags: int = 0) -> bytes:
    if len(payload) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(payload)} bytes exceeds the maximum of {MAX_MESSAGE}")
    return HEADER.pack(len(payload), stream_id, msg_type, flags) + payload


async def read_message(reader: asyncio.StreamReader) -> tuple[int, int, int, bytes]:
    """(stream id, type, flags, payload) of the next message; IncompleteReadError at the end."""
    length, stream_id, msg_type, flags = HEADER.unpack(await reader.readexactly(HEADER.size))
    if length > MAX_MESSAGE:
        raise ProtocolError(f"stream {stream_id}: message of {length} bytes exceeds the maximum of {MAX_MESSAGE}")
    payload = await reader.readexactly(length) if length else b""
    return stream_id, msg_type, flags, payload


Send = Callable[[bytes], None]


class Client:
    """Unary calls to a ttrpc server; responses are matched to calls by stream id."""

    def __init__(self, send: Send, reader: asyncio.StreamReader) -> None:
        self._send = send
        self._reader = reader
        self._next_stream = 1
        self._pending: dict[int, asyncio.Future[ttrpc_pb2.Response]] = {}
        self._closed = False

    async def call(self, service: str, method: str, request: Message, response_type: type[Message],
                   timeout: float | None = None) -> Message:
        if self._closed:
            raise ConnectionResetError("ttrpc client closed")
        stream_id = self._next_stream
        self._next_stream += 2
        req = ttrpc_pb2.Request(service=service, method=method, payload=request.SerializeToString(),
                                timeout_nano=int(timeout * 1e9) if timeout else 0)
        future: asyncio.Future[ttrpc_pb2.Response] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        try:
            self._send(encode_message(stream_id, MSG_REQUEST, req.SerializeToString()))
            resp = await within(timeout, future)
        finally:
            self._pending.pop(stream_id, None)
        if resp.status.code != Code.OK:
            raise TTRPCError(resp.status.code, resp.status.message)
        out = response_type()
        out.ParseFromString(resp.payload)
        return out

    async def run(self) -> None:
        """Read responses until the stream ends; then fail the calls still waiting."""
        try:
            while True:
                stream_id, msg_type, _flags, payload = await read_message(self._reader)
                if msg_type != MSG_RESPONSE:
                    log.debug("ttrpc client: ignoring message type %d on stream %d", msg_type, stream_id)
                    continue
                future = self._pending.get(stream_id)
                if future is None or future.done():
                    log.debug("ttrpc client: response for unknown stream %d", stream_id)
                    continue
                resp = ttrpc_pb2.Response()
                try:
                    resp.ParseFromString(payload)
                except DecodeError as err:
                    future.set_exception(ProtocolError(f"stream {stream_id}: bad response: {err}"))
                    continue
                future.set_result(resp)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionResetError("ttrpc connection closed"))


@dataclass(frozen=True)
class Handler:
    """One method of a served service: its request type and an async function answering it."""

    request_type: type[Message]
    fn: Callable[[Message], Awaitable[Message]]


class Server:
    """Serves unary methods; each request is answered in its own task, so calls overlap."""

    def __init__(self, send: Send, reader: asyncio.StreamReader,
                 handlers: Mapping[tuple[str, str], Handler], *, lenient_services: frozenset[str] = frozenset()) -> None:
        """``lenient_services``: services whose unknown methods are answered OK with an empty
        message (every field at its default) instead of UNIMPLEMENTED."""
        self._send = send
        self._reader = reader
        self._handlers = handlers
        self._lenient = lenient_services
        self._unknown_seen: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task] = set()
        self._last_stream = 0

    def _respond(self, stream_id: int, code: int, message: str = "", payload: bytes = b"") -> None:
        resp = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=code, message=message), payload=payload)
        try:
            self._send(encode_message(stream_id, MSG_RESPONSE, resp.SerializeToString()))
        except (ConnectionError, ProtocolError) as err:
            log.warning("ttrpc server: cannot answer stream %d: %s", stream_id, err)

    async def _handle(self, stream_id: int, handler: Handler, payload: bytes) -> None:
        request = handler.request_type()
        try:
            request.ParseFromString(payload)
        except DecodeError as err:
            self._respond(stream_id, Code.INVALID_ARGUMENT, f"unmarshal request error: {err}")
            return
        try:
            response = await handler.fn(request)
        except Exception as err:  # a handler bug answers this call, it does not end the server
            log.exception("ttrpc server: handler failed on stream %d", stream_id)
            self._respond(stream_id, Code.INTERNAL, str(err))
            return
        self._respond(stream_id, Code.OK, payload=response.SerializeToString())

    async def run(self) -> None:
        try:
            while True:
                stream_id, msg_type, _flags, payload = await read_message(self._reader)
                if msg_type != MSG_REQUEST:
                    continue  # data messages belong to streaming calls, which NRI does not use
                if stream_id % 2 != 1 or stream_id <= self._last_stream:
                    self._respond(stream_id, Code.INVALID_ARGUMENT,
                                  "StreamID must be odd and increasing for client initiated streams")
                    continue
                self._last_stream = stream_id
                req = ttrpc_pb2.Request()
                try:
                    req.ParseFromString(payload)
                except DecodeError as err:
                    self._respond(stream_id, Code.INVALID_ARGUMENT, f"unmarshal request error: {err}")
                    continue
                handler = self._handlers.get((req.service, req.method))
                if handler is None:
                    if req.service in self._lenient:
                        if (req.service, req.method) not in self._unknown_seen:
                            self._unknown_seen.add((req.service, req.method))
                            log.warning("ttrpc server: answering unknown %s/%s with an empty message",
                                        req.service, req.method)
                        self._respond(stream_id, Code.OK)
                    else:
                        self._respond(stream_id, Code.UNIMPLEMENTED, f"{req.service}/{req.method} is not implemented")
                    continue
                task = asyncio.create_task(self._handle(stream_id, handler, req.payload))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for task in list(self._tasks):
                task.cancel()
