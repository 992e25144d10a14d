"""NRI's multiplexing and ttrpc framing, byte for byte (the Go peers are in tests/nri)."""
from __future__ import annotations

import asyncio
import struct

import pytest

from tidal.agent.nri import mux, ttrpc
from tidal.agent.nri.api import api_pb2, ttrpc_pb2
from tidal.agent.nri.plugin import SUBSCRIBED_EVENTS, event_mask


def test_mux_frame_layout():
    assert mux.encode_frames(2, b"abc") == b"\x00\x00\x00\x02\x00\x00\x00\x03abc"
    assert mux.encode_frames(1, b"") == b"\x00\x00\x00\x01\x00\x00\x00\x00"
    with pytest.raises(ValueError, match="reserved"):
        mux.encode_frames(0, b"x")


def test_mux_splits_at_the_maximum_payload_and_reassembles():
    data = (bytes(range(256)) * (mux.MAX_PAYLOAD // 128 + 1))[:mux.MAX_PAYLOAD * 2 + 100]
    frames = mux.encode_frames(7, data)
    decoder = mux.FrameDecoder()
    got = []
    for i in range(0, len(frames), 1_000_003):  # arbitrary read boundaries
        got += decoder.feed(frames[i:i + 1_000_003])
    assert [conn for conn, _ in got] == [7, 7, 7]
    assert [len(p) for _, p in got] == [mux.MAX_PAYLOAD, mux.MAX_PAYLOAD, len(data) - 2 * mux.MAX_PAYLOAD]
    assert b"".join(p for _, p in got) == data


def test_mux_rejects_oversized_frames():
    with pytest.raises(mux.FrameError, match="maximum"):
        mux.FrameDecoder().feed(struct.pack(">II", 1, mux.MAX_PAYLOAD + 1))


def test_ttrpc_header_layout():
    assert ttrpc.encode_message(3, ttrpc.MSG_REQUEST, b"xy", flags=4) == b"\x00\x00\x00\x02\x00\x00\x00\x03\x01\x04xy"
    with pytest.raises(ttrpc.ProtocolError, match="maximum"):
        ttrpc.encode_message(1, ttrpc.MSG_REQUEST, b"x" * (ttrpc.MAX_MESSAGE + 1))


def test_event_mask_is_nris_bit_layout():
    # NRI's EventMask.Set: 1 << (event - 1)
    assert event_mask([api_pb2.RUN_POD_SANDBOX]) == 1
    assert event_mask([api_pb2.CREATE_CONTAINER, api_pb2.UPDATE_CONTAINER]) == (1 << 3) | (1 << 7)
    assert event_mask(SUBSCRIBED_EVENTS) == 0b1010001111


def test_ttrpc_client_and_server_over_a_mux_pair():
    """Python client against Python server through a socketpair and two Muxes; streams 1, 3, …"""

    async def main():
        import socket
        a, b = socket.socketpair()
        ra, wa = await asyncio.open_connection(sock=a)
        rb, wb = await asyncio.open_connection(sock=b)
        left, right = mux.Mux(ra, wa), mux.Mux(rb, wb)

        async def configure(req):
            return api_pb2.ConfigureResponse(events=len(req.runtime_name))

        async def broken(req):
            raise RuntimeError("boom")

        server = ttrpc.Server(lambda d: right.send(1, d), right.open(1), {
            ("svc", "Configure"): ttrpc.Handler(api_pb2.ConfigureRequest, configure),
            ("svc", "Broken"): ttrpc.Handler(api_pb2.Empty, broken)})
        client = ttrpc.Client(lambda d: left.send(1, d), left.open(1))
        tasks = [asyncio.create_task(t) for t in (left.run(), right.run(), server.run(), client.run())]
        rpl = await client.call("svc", "Configure", api_pb2.ConfigureRequest(runtime_name="abcd"),
                                api_pb2.ConfigureResponse, timeout=5)
        assert rpl.events == 4
        with pytest.raises(ttrpc.TTRPCError) as err:
            await client.call("svc", "Nope", api_pb2.Empty(), api_pb2.Empty, timeout=5)
        assert err.value.code == ttrpc.Code.UNIMPLEMENTED
        with pytest.raises(ttrpc.TTRPCError) as err:
            await client.call("svc", "Broken", api_pb2.Empty(), api_pb2.Empty, timeout=5)
        assert err.value.code == ttrpc.Code.INTERNAL and "boom" in err.value.message
        assert client._next_stream == 7
        # a lenient service answers a method it does not know with an empty message
        lenient = ttrpc.Server(lambda d: right.send(3, d), right.open(3), {}, lenient_services=frozenset({"svc"}))
        lenient_client = ttrpc.Client(lambda d: left.send(3, d), left.open(3))
        tasks += [asyncio.create_task(lenient.run()), asyncio.create_task(lenient_client.run())]
        rpl = await lenient_client.call("svc", "FromTheFuture", api_pb2.Empty(), api_pb2.UpdateContainerResponse,
                                        timeout=5)
        assert rpl == api_pb2.UpdateContainerResponse()
        left.close()
        right.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        with pytest.raises(ConnectionError):
            await client.call("svc", "Configure", api_pb2.ConfigureRequest(), api_pb2.ConfigureResponse)

    asyncio.run(main())


def test_ttrpc_request_fields_match_ttrpc_request_proto():
    # github.com/containerd/ttrpc request.proto: service=1 method=2 payload=3 timeout_nano=4 metadata=5
    fields = {f.name: f.number for f in ttrpc_pb2.Request.DESCRIPTOR.fields}
    assert fields == {"service": 1, "method": 2, "payload": 3, "timeout_nano": 4, "metadata": 5}
    assert {f.name: f.number for f in ttrpc_pb2.Response.DESCRIPTOR.fields} == {"status": 1, "payload": 2}
