"""The agent's online history on disk: pure encode/decode, the file adapter, and a restart of
`Predictions` from the state directory."""
import errno
import hashlib
import json
import logging
import os
import struct

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tidal.agent.history import OnlineHistory
from tidal.agent.history_store import (
    FILE_NAME, MAGIC, NO_FILE, VERSION, Discarded, HistoryStore, decode, encode,
)

STEP = 300
NODE = "node-a"


def build(steps, *, keep_steps=100, start_step=1000):
    """An OnlineHistory fed one observation per step (a list of (uid, usage, request)), plus
    one sample in the next step to close the last one. None is a step with no sample at all."""
    h = OnlineHistory(step_seconds=STEP, keep_steps=keep_steps)
    for i, pods in enumerate(steps):
        if pods is not None:
            h.observe((start_step + i) * STEP + 7, pods)
    h.observe((start_step + len(steps)) * STEP + 1, [])
    return h


def now_after(h, steps=0):
    """A time inside the step after the newest closed one (plus `steps` more)."""
    return (h.newest_closed + 1 + steps) * STEP + 30


def same(a: OnlineHistory, b: OnlineHistory) -> None:
    assert a.newest_closed == b.newest_closed and len(a) == len(b)
    x, y = a.node_history(), b.node_history()
    assert x.series_ids == y.series_ids and x.step == y.step and len(x) == len(y)
    for j in range(len(x.series_ids)):
        assert list(x.usage(j)) == list(y.usage(j))
        assert list(x.request(j)) == list(y.request(j))
    assert list(x.total_usage) == list(y.total_usage)


def load(data, h=None, **kw):
    args = dict(node=NODE, step_seconds=STEP, keep_steps=100, now=now_after(h) if h is not None else 0)
    args.update(kw)
    return decode(data, **args)


def resign(data: bytes, body: bytes) -> bytes:
    """`data` with another body and a valid checksum (content problems behind a good checksum)."""
    return MAGIC + struct.pack("<HHQ", VERSION, 0, len(body)) + hashlib.sha256(body).digest() + body


def split(data: bytes):
    body = data[52:]
    (size,) = struct.unpack_from("<I", body)
    return json.loads(body[4:4 + size]), body[4 + size:]


def join(header: dict, payload: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<I", len(raw)) + raw + payload


TWO_PODS = [[("a", 1.0, 2.0), ("b", 0.25, 1.0)], [("a", 1.5, 2.0)], None,
            [("a", 0.5, 4.0), ("b", 3.0, 1.0), ("c", 0.0, 0.5)]]


@pytest.mark.parametrize("steps", [
    [[]],  # a closed step without online pods
    [[("a", 1.0, 2.0)]],
    TWO_PODS,  # a missing step, a pod away, a resized request, a pod with no usage
    [[("a", 0.1 * i, 2.0)] for i in range(150)],  # trimmed to keep_steps
    [[("old", 1.0, 1.0)]] + [[("new", 2.0, 3.0)]] * 120,  # a pod that left beyond the window
], ids=["no-pods", "one-pod", "gaps", "trimmed", "departed"])
def test_round_trip_gives_the_same_history(steps):
    h = build(steps)
    decoded = load(encode(h, NODE, 1.7e9).data, h)
    same(h, decoded.history)
    assert decoded.saved_at == 1.7e9 and decoded.history.open_step is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.lists(st.tuples(
    st.sampled_from(["a", "b", "ü-pod", "d" * 40]),
    st.floats(0, 64, allow_nan=False), st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.25]),
), max_size=4)), min_size=1, max_size=60), st.integers(5, 80))
def test_round_trip_property(steps, keep):
    h = build(steps, keep_steps=keep)
    assume(h.newest_closed is not None)  # no sample at all: nothing closed, nothing to save
    decoded = load(encode(h, NODE, 1.0).data, h, keep_steps=keep)
    same(h, decoded.history)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("abcdef"), st.floats(0, 8, allow_nan=False),
                                   st.sampled_from([1.0, 2.0])), max_size=6), min_size=1, max_size=60),
       st.integers(300, 4000))
def test_above_the_cap_only_the_oldest_steps_are_left_out(steps, cap):
    h = build(steps)
    encoded = encode(h, NODE, 1.0, max_bytes=cap)
    assert len(encoded.data) <= cap
    restored = load(encoded.data, h).history
    kept = {uid: (first, usage, request) for uid, first, usage, request in restored.closed_pods()}
    cut = min((first for first, _, _ in kept.values()), default=h.newest_closed + 1)
    for uid, first, usage, request in h.closed_pods():  # every pod: exactly its steps from the cut on
        if first + len(usage) - 1 < cut:
            assert uid not in kept
            continue
        skip = max(0, cut - first)
        assert kept[uid] == (max(first, cut), usage[skip:], request[skip:])
    assert restored.newest_closed == h.newest_closed
    if encoded.dropped_steps == 0:
        same(h, restored)


def test_the_pod_cap_leaves_out_the_oldest_steps_too():
    h = build([[(f"p{i}", 1.0, 1.0)] for i in range(10)])
    restored = load(encode(h, NODE, 1.0, max_pods=3).data, h).history
    assert [uid for uid, *_ in restored.closed_pods()] == ["p7", "p8", "p9"]


def flip(i):
    return lambda d: d[:i] + bytes([d[i] ^ 0x40]) + d[i + 1:]


def with_header(**changes):
    def change(d):
        header, payload = split(d)
        header.update(changes)
        return resign(d, join(header, payload))
    return change


def with_payload(f):
    def change(d):
        header, payload = split(d)
        return resign(d, join(header, f(payload)))
    return change


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: b"", "corrupt: empty file"),
    (lambda d: b'{"pods": []}', "corrupt: not a Tidal online-history file"),
    (flip(0), "corrupt: not a Tidal online-history file"),
    (lambda d: d[:30], "truncated: 30 bytes"),
    (lambda d: d[:-9], "truncated: "),
    (lambda d: d + b"\0", "corrupt: 1 bytes after the end"),
    (lambda d: d[:8] + struct.pack("<H", 2) + d[10:], "format version 2, this agent reads version 1"),
    (lambda d: d[:10] + b"\1\0" + d[10 + 2:], "corrupt: reserved field"),
    (flip(100), "checksum mismatch"),
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "checksum mismatch"),
    (lambda d: resign(d, b"\xff\xff\xff\x00{}"), "corrupt: header longer than the file"),
    (lambda d: resign(d, join({}, b"")[:-1] + b"x"), "corrupt: "),  # not JSON
    (with_header(node="node-b"), "saved by node 'node-b', this is node 'node-a'"),
    (with_header(stepSeconds=60), "step of 60 s, this agent uses 300 s"),
    (with_header(savedAt=float("nan")), "corrupt: savedAt"),
    (with_header(pods=[["a", 1000, 4, 1]]), "corrupt: "),  # payload of another layout
    (with_header(pods=[["a", 1000, 0, 0]]), "corrupt: pod 'a': steps is 0"),
    (with_header(newestClosed="x"), "corrupt: newestClosed"),
    (with_payload(lambda p: struct.pack("<d", -1.0) + p[8:]), "corrupt: pod 'a': a negative or non-finite value"),
    (with_payload(lambda p: struct.pack("<d", float("inf")) + p[8:]), "corrupt: pod 'a': a negative or non-finite value"),
    (with_payload(lambda p: p + b"\0" * 8), "corrupt: 8 bytes after the last pod"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_bad_file_is_discarded_with_its_reason(mutate, reason):
    h = build(TWO_PODS)
    data = encode(h, NODE, 1.0).data
    with pytest.raises(Discarded) as err:
        load(mutate(data), h)
    assert str(err.value).startswith(reason)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_damaged_byte_or_truncation_is_discarded_never_raised(data):
    h = build(TWO_PODS)
    good = encode(h, NODE, 1.0).data
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(good) - 1))
        bad = good[:i] + bytes([good[i] ^ data.draw(st.integers(1, 255))]) + good[i + 1:]
    else:
        bad = good[:data.draw(st.integers(0, len(good) - 1))]
    with pytest.raises(Discarded):
        load(bad, h)


@pytest.mark.parametrize("age_steps, kept", [
    (0, True),  # restarted within the step after the save
    (12, True),  # an hour's reboot
    (98, True),  # the newest step is the oldest one the window keeps at the next close
    (99, False),  # a whole keep window: nothing would survive the next close
    (10_000, False),
])
def test_staleness_is_the_keep_window(age_steps, kept):
    h = build(TWO_PODS)
    data = encode(h, NODE, 1.0).data
    if kept:
        same(h, load(data, h, now=now_after(h, age_steps)).history)
    else:
        with pytest.raises(Discarded, match=r"^stale: its newest step ended .* ago, the history keeps 8.3 h"):
            load(data, h, now=now_after(h, age_steps))


def test_a_history_from_the_future_is_discarded():
    h = build(TWO_PODS)
    with pytest.raises(Discarded, match="from the future"):
        load(encode(h, NODE, 1.0).data, h, now=now_after(h) - STEP)


def test_a_restored_history_carries_a_short_gap_and_leaves_a_long_one_absent_and_trims():
    h = build([[("a", 1.0, 2.0)]] * 5)
    for gap, filled in ((3, ([1.0] * 3, [2.0] * 3)), (13, ([0.0] * 13, [0.0] * 13))):
        t = now_after(h, gap)
        restored = load(encode(h, NODE, 1.0).data, h, now=t).history
        restored.observe(t, [("a", 2.0, 2.0)])
        restored.observe(t + STEP, [])
        history = restored.node_history()
        assert list(history.usage(0)) == [1.0] * 5 + filled[0] + [2.0], gap
        assert list(history.request(0)) == [2.0] * 5 + filled[1] + [2.0], gap
    shorter = load(encode(h, NODE, 1.0).data, h, keep_steps=2).history
    assert len(shorter) == 2


# -- the file adapter ---------------------------------------------------------------------------
def restore(store, h):
    return store.load(step_seconds=STEP, keep_steps=h.keep_steps, now=now_after(h))


def test_missing_file_is_no_error(tmp_path, caplog):
    h = build(TWO_PODS)
    with caplog.at_level(logging.INFO):
        loaded = restore(HistoryStore(tmp_path / FILE_NAME, NODE), h)
    assert loaded.history is None and loaded.reason == NO_FILE == "no saved history"
    assert loaded.origin() == {"restored": False, "reason": "no saved history"}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_save_then_load_is_atomic_and_once_per_closed_step(tmp_path):
    h = build(TWO_PODS)
    store = HistoryStore(tmp_path / "state" / FILE_NAME, NODE)  # the directory is made
    assert store.save(h, 1.7e9)
    assert not store.save(h, 1.7e9 + 60)  # the same closed step: not written again
    assert os.listdir(tmp_path / "state") == [FILE_NAME]  # no temporary file left
    loaded = restore(HistoryStore(tmp_path / "state" / FILE_NAME, NODE), h)
    same(h, loaded.history)
    assert loaded.origin() == {"restored": True, "steps": 4, "savedAt": "2023-11-14T22:13:20Z"}
    h.observe(now_after(h, 1), [])  # one more closed step: written again
    assert store.save(h, 1.7e9 + 300)


@pytest.mark.parametrize("content, reason", [
    (b"\0" * 10, "corrupt: not a Tidal online-history file"),
    (None, "unreadable: Is a directory"),
])
def test_a_bad_file_on_disk_is_discarded_with_a_warning(tmp_path, caplog, content, reason):
    path = tmp_path / FILE_NAME
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    h = build(TWO_PODS)
    with caplog.at_level(logging.WARNING):
        loaded = restore(HistoryStore(path, NODE), h)
    assert loaded.history is None and loaded.reason == reason
    assert loaded.origin() == {"restored": False, "reason": reason}
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and reason in caplog.text


def test_a_file_above_the_cap_is_not_read(tmp_path):
    path = tmp_path / FILE_NAME
    path.write_bytes(b"x" * 5000)
    loaded = restore(HistoryStore(path, NODE, max_bytes=4096), build(TWO_PODS))
    assert loaded.reason == "too large: 5000 bytes, the cap is 4096"


def test_a_leftover_temporary_file_is_removed_at_load(tmp_path):
    h = build(TWO_PODS)
    store = HistoryStore(tmp_path / FILE_NAME, NODE)
    store.save(h, 1.0)
    store.tmp_path.write_bytes(b"half a file")
    assert restore(store, h).history is not None
    assert os.listdir(tmp_path) == [FILE_NAME]


def test_write_failures_are_counted_and_logged_once_per_distinct_error(tmp_path, caplog, monkeypatch):
    (tmp_path / "file").write_text("")
    store = HistoryStore(tmp_path / "file" / FILE_NAME, NODE)  # under a file: ENOTDIR / EEXIST
    h = build([[("a", 1.0, 1.0)]])
    with caplog.at_level(logging.WARNING):
        for i in range(3):
            h.observe(now_after(h, 1), [("a", 1.0, 1.0)])  # closes a step
            assert not store.save(h, 1.0)
    assert store.failures == 3 and store.last_error
    assert len(caplog.records) == 1 and "online history not saved" in caplog.text

    caplog.clear()
    store.path = tmp_path / FILE_NAME  # the directory is fine now, but the disk is full
    store.path.write_bytes(b"the previous file")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            h.observe(now_after(h, 1), [("a", 1.0, 1.0)])
            assert not store.save(h, 1.0)
    assert store.failures == 5 and "No space left on device" in store.last_error
    assert len(caplog.records) == 1 and "No space left" in caplog.text  # a new error: logged once
    assert sorted(os.listdir(tmp_path)) == ["file", FILE_NAME]  # no temporary file left
    assert store.path.read_bytes() == b"the previous file"  # the old file stays whole

    monkeypatch.undo()
    h.observe(now_after(h, 1), [("a", 1.0, 1.0)])
    assert store.save(h, 1.0) and store.last_error is None and store.failures == 5


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_an_unwritable_directory_is_a_counted_failure(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o500)
    try:
        store = HistoryStore(state / FILE_NAME, NODE)
        assert not store.save(build(TWO_PODS), 1.0)
        assert store.failures == 1 and "Permission denied" in store.last_error
    finally:
        state.chmod(0o700)


def test_the_saved_file_respects_the_cap_and_says_so_once(tmp_path, caplog):
    h = build([[(f"p{j}", 1.0 + i, 1.0) for j in range(5)] for i in range(90)])
    store = HistoryStore(tmp_path / FILE_NAME, NODE, max_bytes=2048)
    with caplog.at_level(logging.WARNING):
        assert store.save(h, 1.0)
        h.observe(now_after(h, 1), [])
        assert store.save(h, 1.0)
    assert (tmp_path / FILE_NAME).stat().st_size <= 2048
    assert len(caplog.records) == 1 and "oldest" in caplog.text
    restored = HistoryStore(tmp_path / FILE_NAME, NODE, max_bytes=2048).load(
        step_seconds=STEP, keep_steps=100, now=now_after(h)).history
    assert 0 < len(restored) < len(h) and restored.newest_closed == h.newest_closed


# -- a restart of the agent's predictions --------------------------------------------------------
class _Sampler:
    node_cpu_millicores = 1000.0  # not the first tick: a CPU rate exists

    def __init__(self):
        from tidal.agent.collector.histogram import WindowStats
        self.usages = []
        self.stats = (WindowStats.of(300, [500, 900]), WindowStats.of(300, [100, 300]))

    def pod_usages(self):
        return self.usages

    def online_stats(self, window):
        return self.stats


def _pods(i):
    from tidal.api import qos
    from tidal.agent.collector.sampler import PodInfo, PodUsage
    web = PodInfo("u-web", "ns", "web", "Burstable", qos.QoSLevel.LS, cpu_request_millicores=4000)
    api = PodInfo("u-api", "ns", "api", "Burstable", qos.QoSLevel.LS, cpu_request_millicores=2000)
    pods = [PodUsage(web, 1000 + 400 * (i % 12), 10)]
    if i % 50 < 40:
        pods.append(PodUsage(api, 300.0 + 10 * (i % 7), 10))
    return pods


def test_predictions_survive_a_restart(tmp_path):
    from tidal.agent.run import Predictions
    from tidal.api.policy import ColocationPolicy
    from tidal.predict.predictors import REALISABLE

    state = tmp_path / "state"
    sampler, policy = _Sampler(), ColocationPolicy.from_spec({})
    start = 1_700_000_000 - 1_700_000_000 % STEP
    first = Predictions(step_seconds=STEP)
    assert first.restore(HistoryStore(state / FILE_NAME, NODE), start) == {
        "restored": False, "reason": "no saved history"}
    steps = 24 * 12  # a day
    for i in range(steps):
        sampler.usages = _pods(i)
        first.observe(sampler, start + i * STEP + 5)  # closes step i-1 and saves it
    before = first.status(sampler, policy)
    assert before["history"] == {"restored": False, "reason": "no saved history"}

    # a quick restart, within the step after the newest saved one: predicts at once
    second = Predictions(step_seconds=STEP)
    origin = second.restore(HistoryStore(state / FILE_NAME, NODE), start + (steps - 1) * STEP + 60)
    assert origin["restored"] and origin["steps"] == steps - 1
    same(first.history, second.history)
    for cls in REALISABLE:
        if cls.name != "oracle":
            assert cls().predict(second.history.node_history()) == cls().predict(first.history.node_history())
    second.observe(sampler, start + (steps - 1) * STEP + 90)
    after = second.status(sampler, policy)
    assert after["onlinePeak"] == before["onlinePeak"] and after["steps"] == before["steps"]
    assert after["history"]["restored"] and after["history"]["steps"] == steps - 1

    # after a reboot that missed steps: a provisional prediction from the open step (the pods
    # there now) until the first step this agent closes, then the restored history
    third = Predictions(step_seconds=STEP)
    t = start + (steps + 5) * STEP + 30
    assert third.restore(HistoryStore(state / FILE_NAME, NODE), t)["restored"]
    third.observe(sampler, t)
    provisional = third.status(sampler, policy)
    assert provisional["basis"]["provisional"] and provisional["basis"]["historySteps"] == 1
    third.observe(sampler, t + STEP)
    status = third.status(sampler, policy)
    assert status["steps"] == steps + 6 and status["history"]["restored"]
    assert "provisional" not in status["basis"]
    # the memory peak is the window's largest working set (the history predictors predict CPU)
    assert status["memoryBasis"] == {"statistic": "max", "windowSeconds": policy.overselling.window_seconds,
                                     "samples": status["memoryBasis"]["samples"]}
    assert status["memoryBasis"]["samples"] >= 1


def test_predictions_without_a_store_report_no_history_origin():
    from tidal.agent.run import Predictions
    from tidal.api.policy import ColocationPolicy

    p, sampler = Predictions(step_seconds=STEP), _Sampler()
    sampler.usages = _pods(0)
    p.observe(sampler, 0)
    p.observe(sampler, STEP)
    status = p.status(sampler, ColocationPolicy.from_spec({}))
    assert "history" not in status and p.history_origin == {"restored": False, "reason": "not persisted"}
