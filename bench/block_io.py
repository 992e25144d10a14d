# SPDX-License-Identifier: Apache-2.0
"""make bench-block-io: an online service's disk reads beside a BE job's stream, with and without
Tidal's BE block I/O caps (``features.blockIO``).

* **The online service**: a process reading 4 KiB at random offsets of a 1 GiB file with
  ``O_DIRECT``, at a fixed rate (``--rate``, 200/s), each read timed from when it was due (a
  late read counts its wait: no coordinated omission). It stands for a database whose data does
  not fit in memory, or for any online read that misses the page cache: every read goes to the
  disk and queues there with everyone else's.
* **The BE job**: a process reading a 4 GiB file in 1 MiB ``O_DIRECT`` blocks, again and again,
  as fast as the disk lets it, with ``--be-streams`` (4) threads each reading its own part in
  order (a transcoding or ETL job's input, read by several workers: several requests in the
  disk's queue at once, as readahead makes them too). ``--be-io direct-write`` has it write the
  file in place instead with ``O_DIRECT`` (a job writing its output, or a database's direct
  writes); ``--be-io buffered-write`` writes through the page cache (the common case: the
  kernel's writeback sends the pages to the disk later; the bench syncs them, from its own
  cgroup, after the treatment; the BE MB/s are then what went into the page cache). cgroup v1
  throttles direct writes; writeback it charges to the root cgroup.
* Both in kubelet-style cgroups below a private root (``tidal_dev.testing.local_kubelet``,
  every v1 hierarchy, blkio included): the online service in an LS pod's container, the BE job in
  a BE pod's.

Treatments, in a balanced order each round (``bench/round_order.py``):

* ``solo``: the online service alone;
* ``no_isolation``: beside the BE stream, nothing capped. This is also the Kubernetes default: a
  BestEffort pod has no block I/O limit (the kubelet sets none, for any pod);
* ``equal_shares``: beside the BE stream with ``features.blockIO`` on at the policy's defaults
  (100 MiB/s of reads and of writes per disk for the BE pods together), each BE container held to
  an equal share: the agent's QoS engine run once at the start (the feature's first round, when
  nothing is known of what the containers use; what every round did before the shares followed
  use);
* ``small_requests``: beside the BE stream, nothing capped, the disk's largest request set to
  ``--max-request-kib`` (the ``tidal.colocation.disk_queue`` role's default, 64 KiB): what the
  node role alone does;
* ``tidal``: the node as Tidal prepares it: the disk's requests as in ``small_requests``, and the
  QoS engine run every ``--round-seconds`` (1 s, the agent's default interval) as the agent runs
  it, the shares following what each BE container uses.

``solo``, ``no_isolation`` and ``equal_shares`` run with the disk's requests as the kernel left
them (``queue/max_sectors_kb``, read at the start and put back at the end); ``--max-request-kib
0`` leaves the disk alone in every treatment and drops ``small_requests``.

In the Tidal treatments the feature, the executor and its journal are the agent's; the journal
restores every file after the treatment. Beside the BE job's container there are
``--idle-be-containers`` (3) BE containers that read nothing (a BE pod's sidecars, other BE jobs
computing): with equal shares each of them holds as much of the cap as the reading one.

``--background lab`` (bench/lab_background.py, as bench-isolation's and bench-memory's) runs every
treatment beside a private lab's control plane under a stream of API writes: its etcd writes
and syncs on the same disk, as a node's daemons do.

Per round and treatment one JSON line: online p50, p90 and p99 (ms), reads done, errors, BE MB/s,
what the disk wrote per second while the BE job ran (every writer's, writeback included: for
buffered writes what reached the disk), the agent's rounds and the cgroup files they wrote. The last line: per treatment the medians over
rounds, the p99's range, the median over rounds of p99 over the round's solo, and the cgroup
files written per agent round.

The files live in ``--dir`` (default ``/var/tmp/tidal-bench-block-io``, on the disk the machine's
root file system is on) and are kept for the next run (5 GiB); ``O_DIRECT`` reads bypass the page
cache, so nothing needs to be dropped between treatments.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import yaml

from tidal.agent.collector.cgroups import CgroupVersion, PodQOSClass
from tidal.agent.qos.be_block_io import BEBlockIO, disk_holding
from tidal.agent.qos.capabilities import probe
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.feature import Context
from tidal.agent.qos.strategy import ContainerState, NodeState, PodState
from tidal.api.policy import BlockIO, ColocationPolicy
from tidal.api.qos import QoSLevel
from tidal_dev.testing.local_kubelet import LocalKubelet
from tidal_dev.testing.real_cgroups import RealCgroups

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab_background  # noqa: E402
from round_order import ORDERS, round_order  # noqa: E402

MiB = 1 << 20
TREATMENTS = ("solo", "no_isolation", "equal_shares", "small_requests", "tidal")
#: the treatments run with the disk's requests at --max-request-kib (the node role's setting)
SMALL_REQUESTS = ("small_requests", "tidal")
ROLE_DEFAULTS = Path(__file__).resolve().parents[1] / "roles" / "disk_queue" / "defaults" / "main.yml"
ONLINE_FILE, ONLINE_SIZE = "online.dat", 1024 * MiB
BE_FILE, BE_SIZE = "be.dat", 4096 * MiB

#: the online service: random 4 KiB direct reads at a fixed rate; prints each read's latency (s)
ONLINE = r"""
import json, mmap, os, random, sys, time
path, rate, seconds, procs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
for p in procs:
    with open(p, "w") as f:
        f.write(str(os.getpid()))
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
blocks = os.fstat(fd).st_size // 4096
buf, rng = mmap.mmap(-1, 4096), random.Random(7)
print("ready", flush=True)
sys.stdin.readline()
start, lat, errors = time.monotonic(), [], 0
for i in range(int(rate * seconds)):
    due = start + i / rate
    now = time.monotonic()
    if now < due:
        time.sleep(due - now)
    try:
        os.preadv(fd, [buf], rng.randrange(blocks) * 4096)
    except OSError:
        errors += 1
        continue
    lat.append(time.monotonic() - due)
print(json.dumps({"lat": lat, "errors": errors}))
"""

#: the BE job: ``streams`` threads, each going through its own part of the file in order in 1 MiB
#: blocks — direct reads (``read``), direct writes (``direct-write``) or writes to the page cache
#: (``buffered-write``, flushed by the kernel's writeback) — until stdin has a line; prints bytes
#: and seconds (for ``buffered-write``: what went into the page cache)
BE = r"""
import mmap, os, sys, threading, time
path, streams, mode, procs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
for p in procs:
    with open(p, "w") as f:
        f.write(str(os.getpid()))
flags = {"read": os.O_RDONLY | os.O_DIRECT, "direct-write": os.O_WRONLY | os.O_DIRECT,
         "buffered-write": os.O_WRONLY}[mode]
fd = os.open(path, flags)
size, stop, done = os.fstat(fd).st_size, threading.Event(), [0] * streams
part = size // streams // (1 << 20) * (1 << 20)
io = os.preadv if mode == "read" else os.pwritev

def stream(i):
    buf, offset = mmap.mmap(-1, 1 << 20), 0
    buf.write(os.urandom(1 << 20))
    while not stop.is_set():
        n = io(fd, [buf], i * part + offset)
        done[i] += n
        offset = offset + n if n and offset + n < part else 0

threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(streams)]
print("ready", flush=True)
start = time.monotonic()
for t in threads:
    t.start()
sys.stdin.readline()
stop.set()
for t in threads:
    t.join()
print(sum(done), time.monotonic() - start, flush=True)
"""


def log(msg: str) -> None:
    print(f"[bench-block-io {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_file(path: Path, size: int) -> None:
    """A file of ``size`` bytes of data (not holes: a hole is read without the disk), kept."""
    if path.exists() and path.stat().st_size == size:
        return
    log(f"writing {path} ({size // MiB} MiB, kept for the next run)")
    chunk = os.urandom(MiB)
    with open(path, "wb") as f:
        for _ in range(size // MiB):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def start(script: str, args: list[str], dirs) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", script, *args, *(str(d / "cgroup.procs") for d in dirs)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if child.stdout.readline() != "ready\n":
        raise SystemExit(f"{script.split(chr(10))[1]}: exited with {child.wait()} before it was ready")
    return child


class Rounds:
    """The agent's rounds during a treatment: the QoS engine run every ``seconds`` in a thread
    (the only user of the engine meanwhile), counting the cgroup files it wrote; None: no round."""

    def __init__(self, engine: QoSEngine, state: NodeState, seconds: float | None) -> None:
        self.engine, self.state, self.seconds = engine, state, seconds
        self.stop, self.writes, self.rounds = threading.Event(), 0, 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.seconds):
            self.writes += sum(self.engine.run(Context(self.state, now=time.monotonic())).changed.values())
            self.rounds += 1

    def __enter__(self) -> "Rounds":
        if self.seconds is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()


def role_max_request_kib() -> int:
    """The node role's default (roles/disk_queue/defaults/main.yml)."""
    value = (yaml.safe_load(ROLE_DEFAULTS.read_text()) or {}).get("disk_queue_max_request_kib")
    if not isinstance(value, int):
        raise SystemExit(f"{ROLE_DEFAULTS}: no disk_queue_max_request_kib")
    return value


class DiskRequests:
    """The disk's ``queue/max_sectors_kb``: the kernel's value read at the start, set per treatment,
    put back at the end."""

    def __init__(self, name: str) -> None:
        self.path = Path("/sys/block") / name / "queue" / "max_sectors_kb"
        self.stat = Path("/sys/block") / name / "stat"
        self.original = int(self.path.read_text())

    def written(self) -> int:
        """Bytes the disk has written since boot (``stat``'s sectors written, of 512 bytes)."""
        return int(self.stat.read_text().split()[6]) * 512

    def set(self, kib: int) -> None:
        if int(self.path.read_text()) != kib:
            self.path.write_text(str(kib))
            if int(self.path.read_text()) != kib:
                raise SystemExit(f"{self.path}: the kernel kept {self.path.read_text().strip()}, not {kib}")

    def restore(self) -> None:
        self.set(self.original)


def run_treatment(treatment: str, args, kubelet: LocalKubelet, engine: QoSEngine, pods, dirs,
                  requests: DiskRequests) -> dict:
    online_dirs, be_dirs = dirs
    requests.set(args.max_request_kib if args.max_request_kib and treatment in SMALL_REQUESTS else requests.original)
    off = ColocationPolicy()
    on = replace(off, features=replace(off.features, block_io=BlockIO(
        enabled=True, read_mib_per_second=args.read_mib_per_second, read_iops=args.read_iops,
        write_mib_per_second=args.write_mib_per_second)))
    caps = {"blkio.throttle": True}
    capped = treatment in ("equal_shares", "tidal")
    state = NodeState(pods, float(os.cpu_count() or 1), 0, on if capped else off, caps, kubelet.layout)
    writes = sum(engine.run(Context(state, now=time.monotonic())).changed.values())
    rounds = Rounds(engine, state, args.round_seconds if treatment == "tidal" else None)
    be = None
    written, began = requests.written(), time.monotonic()
    with rounds:
        if treatment != "solo":
            be = start(BE, [str(args.dir / BE_FILE), str(args.be_streams), args.be_io], be_dirs)
            time.sleep(args.warmup)  # the stream reaches its pace (and its share) before the online reads are timed
        online = start(ONLINE, [str(args.dir / ONLINE_FILE), str(args.rate), str(args.seconds)], online_dirs)
        out, _ = online.communicate("go\n", timeout=args.seconds * 20 + 60)
        result = json.loads(out)
        be_mb_s = 0.0
        if be is not None:
            try:
                text, _ = be.communicate("stop\n", timeout=120)
            finally:
                be.kill()  # (no-op once it exited) never left running in the cgroup
            done, seconds = text.split()
            be_mb_s = int(done) / float(seconds) / 1e6
        disk_write_mb_s = (requests.written() - written) / (time.monotonic() - began) / 1e6
    if args.be_io == "buffered-write":  # the BE job's dirty pages on the disk before the next treatment
        os.sync()
    if capped:  # the journal puts the BE containers' files back
        engine.run(Context(replace(state, policy=off), now=time.monotonic()))
    lat = [x * 1000 for x in result["lat"]]
    return {"p50_ms": round(quantile(lat, 0.5), 3), "p90_ms": round(quantile(lat, 0.9), 3),
            "p99_ms": round(quantile(lat, 0.99), 3),
            "reads": len(lat), "errors": result["errors"], "be_mb_per_s": round(be_mb_s, 1),
            "disk_write_mb_per_s": round(disk_write_mb_s, 1),
            "agent_rounds": rounds.rounds + 1 if capped else 0, "cgroup_writes": writes + rounds.writes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=15.0, help="online reads timed per treatment")
    parser.add_argument("--rate", type=float, default=200.0, help="online reads per second")
    parser.add_argument("--be-streams", type=int, default=4,
                        help="the BE job's concurrent sequential readers (its requests in the disk's queue)")
    parser.add_argument("--warmup", type=float, default=3.0,
                        help="seconds the BE stream runs before the timing (tidal: a few rounds to find its share)")
    parser.add_argument("--idle-be-containers", type=int, default=3,
                        help="BE containers beside the BE job's that read nothing")
    parser.add_argument("--round-seconds", type=float, default=1.0,
                        help="the agent's round interval in the tidal treatment (qosCheckIntervalSeconds)")
    parser.add_argument("--read-mib-per-second", type=int, default=BlockIO().read_mib_per_second,
                        help="tidal's BE read cap (features.blockIO.readMiBPerSecond; default: the policy's)")
    parser.add_argument("--write-mib-per-second", type=int, default=BlockIO().write_mib_per_second,
                        help="tidal's BE write cap (features.blockIO.writeMiBPerSecond; default: the policy's)")
    parser.add_argument("--be-io", choices=("read", "direct-write", "buffered-write"), default="read",
                        help="what the BE job does with its file, in 1 MiB blocks: direct reads, direct writes, "
                             "or writes to the page cache (flushed by writeback; the bench syncs them after the treatment)")
    parser.add_argument("--read-iops", type=int, default=BlockIO().read_iops,
                        help="tidal's BE read IOPS cap (features.blockIO.readIOPS; default: the policy's)")
    parser.add_argument("--max-request-kib", type=int, default=None,
                        help="the disk's largest request in the small_requests and tidal treatments "
                             "(queue/max_sectors_kb; default: the disk_queue role's); 0: the disk as it is throughout")
    parser.add_argument("--order", choices=ORDERS, default="balanced")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/tidal-bench-block-io"))
    lab_background.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.max_request_kib is None:
        args.max_request_kib = role_max_request_kib()
    treatments = TREATMENTS if args.max_request_kib else tuple(t for t in TREATMENTS if t != "small_requests")
    if os.geteuid() != 0:
        raise SystemExit("bench-block-io needs root: it creates cgroups and moves processes into them")
    caps = {c.name: c for c in probe()}
    if not caps["blkio.throttle"].supported:
        raise SystemExit(f"no block I/O throttling here: {caps['blkio.throttle'].reason}")
    args.dir.mkdir(parents=True, exist_ok=True)
    ensure_file(args.dir / ONLINE_FILE, ONLINE_SIZE)
    ensure_file(args.dir / BE_FILE, BE_SIZE)
    disk = disk_holding(args.dir)
    if disk is None:
        raise SystemExit(f"{args.dir} is not on a whole disk of /sys/block: its reads could not be capped")

    requests = DiskRequests(disk.name)
    background, background_report, lab = None, {"kind": "none"}, None
    with tempfile.TemporaryDirectory() as tmp:
        real = RealCgroups(Path(tmp))
        try:
            kubelet = LocalKubelet(real)
            if args.background == "lab":  # the lab's etcd writes to the same disk, as a node's daemons do
                from tidal_dev.lab.lab import Lab
                lab_background.place_daemons(args, kubelet, real, log)
                lab = Lab(Path(tmp) / "lab")
                lab.up(nodes=0, real_nodes=0)
                background, background_report = lab_background.start(args, lab.kubeconfig_path, Path(tmp), log)
            if kubelet.layout.version is not CgroupVersion.V1 or kubelet.layout.blkio_root is None:
                raise SystemExit("bench-block-io builds a cgroup v1 tree with blkio (this machine's layout)")
            ls_cid, be_cid = (f"containerd://{secrets.token_hex(32)}" for _ in range(2))
            idle_cids = [f"containerd://{secrets.token_hex(32)}" for _ in range(args.idle_be_containers)]
            ls_uid, be_uid, idle_uid = (f"{secrets.token_hex(4)}-0000-4000-8000-{secrets.token_hex(6)}"
                                        for _ in range(3))
            online_dirs = kubelet.create_pod(ls_uid, PodQOSClass.BURSTABLE, [ls_cid])[ls_cid]
            be_dirs = kubelet.create_pod(be_uid, PodQOSClass.BEST_EFFORT, [be_cid])[be_cid]
            pods = (PodState(ls_uid, PodQOSClass.BURSTABLE, QoSLevel.LS, (ContainerState(ls_cid),), "bench", "online"),
                    PodState(be_uid, PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState(be_cid),), "bench", "be"))
            if idle_cids:
                kubelet.create_pod(idle_uid, PodQOSClass.BEST_EFFORT, idle_cids)
                pods += (PodState(idle_uid, PodQOSClass.BEST_EFFORT, QoSLevel.BE,
                                  tuple(ContainerState(c) for c in idle_cids), "bench", "be-idle"),)
            engine = QoSEngine(Path(tmp) / "journal.json", features=[BEBlockIO()])
            log(f"disk {disk.name} ({disk.device}); {args.rounds} rounds of {args.seconds:g} s per treatment, "
                f"{args.rate:g} reads/s, order {args.order}; BE read cap (tidal) {args.read_mib_per_second} MiB/s, "
                f"{args.read_iops or 'no'} IOPS cap; write cap {args.write_mib_per_second} MiB/s; "
                f"{args.be_streams} BE streams ({args.be_io}); "
                f"{args.idle_be_containers} idle BE containers; agent rounds every {args.round_seconds:g} s; "
                f"largest request {requests.original} KiB (kernel), "
                f"{args.max_request_kib or requests.original} KiB ({', '.join(SMALL_REQUESTS)})")
            rows: dict[str, list[dict]] = {t: [] for t in treatments}
            for round_ in range(args.rounds):
                for treatment in round_order(treatments, round_, args.order):
                    r = run_treatment(treatment, args, kubelet, engine, pods, (online_dirs, be_dirs), requests)
                    rows[treatment].append(r)
                    print(json.dumps({"round": round_ + 1, "treatment": treatment, **r}), flush=True)
            if engine.journal.originals:
                raise SystemExit(f"files left changed: {sorted(engine.journal.originals)}")
        finally:
            requests.restore()
            background_report = lab_background.stop(background, background_report)
            try:
                if lab is not None:
                    lab.down(wipe=True)
            finally:
                lab_background.release_daemons(args)
                real.cleanup()

    summary = {}
    for t in treatments:
        ratios = [r["p99_ms"] / s["p99_ms"] for r, s in zip(rows[t], rows["solo"]) if s["p99_ms"] > 0]
        summary[t] = {
            "p50_ms": statistics.median(r["p50_ms"] for r in rows[t]),
            "p90_ms": statistics.median(r["p90_ms"] for r in rows[t]),
            "p99_ms": statistics.median(r["p99_ms"] for r in rows[t]),
            "p99_ms_min": min(r["p99_ms"] for r in rows[t]),
            "p99_ms_max": max(r["p99_ms"] for r in rows[t]),
            "p99_over_solo": round(statistics.median(ratios), 3) if ratios else None,
            "errors": sum(r["errors"] for r in rows[t]),
            "be_mb_per_s": statistics.median(r["be_mb_per_s"] for r in rows[t]),
            "disk_write_mb_per_s": statistics.median(r["disk_write_mb_per_s"] for r in rows[t]),
            "cgroup_writes_per_round": round(sum(r["cgroup_writes"] for r in rows[t])
                                             / max(1, sum(r["agent_rounds"] for r in rows[t])), 2),
        }
    print(json.dumps({**summary, "max_request_kib": {"kernel": requests.original, "tidal": args.max_request_kib},
                      "background": {**background_report, "daemons_cgroup": args.daemons_cgroup}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
