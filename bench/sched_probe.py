# SPDX-License-Identifier: Apache-2.0
"""``make bench-sched-probe``: what a BE job costs an online task on a node busy with daemons,
measured with cgroups and two small C programs only (no lab, no agent, no nginx).

bench-isolation measures the whole path (client, nginx, the agent's control) and its rounds
spread widely beside a busy lab; this probe isolates the scheduler's part. Below a private
cgroup (``/sys/fs/cgroup/cpu/tidal-sched-probe-<hex>``, the "node") it builds the kubelet's
layout: ``kubepods`` (cpu.shares 2048, the kubelet's for 2 CPUs), ``kubepods/burstable/ls``
(the online pod), ``kubepods/besteffort/be`` (the BE pod). The online task (``probe``) wakes
every millisecond on an absolute timer, works 200 µs and records how late each wake-up ran
(p50, p99, p99.9 over ``--seconds``): a request's wake-up. The BE job is one pure hog per CPU.
The node's daemons (``--daemons``):

* ``slice`` (as on a systemd node): 2 hogs busy 3 ms then asleep up to 2 ms, in one
  ``system.slice`` group (cpu.shares 1024) beside ``kubepods``;
* ``root``: 8 hogs busy 0.5 ms then asleep up to 4 ms, loose in the root cgroup (each an
  entity of its own beside the node's one group, as bench-isolation's ``--background lab``);
* ``quiet``: no daemons.

Treatments, interleaved in every round (a carry-over balanced order, bench/round_order.py):
``none`` (no BE: the baseline, the daemons alone);
``shares2`` (Kubernetes' default: BE pod and besteffort parent at cpu.shares 2); ``pod_idle``
(Tidal: cpu.idle on the BE pod); ``parent_idle`` (cpu.idle on the besteffort parent too, which the
kubelet refuses at start); ``pod_idle_quota`` (``pod_idle`` with the parent's quota at 0.2 CPU:
suppression holding BE at a floor); ``outside_kubepods`` (BE in an idle group beside kubepods).
``--slice-us N`` adds ``none_slice``, ``shares2_slice`` and ``pod_idle_slice``: the same with the
online task asking for an N µs EEVDF slice (what ``features.onlineSchedSlice`` gives online pods'
threads; Linux >= 6.12).
Each line: the probe's lateness, the CPUs BE and the daemons got. The last line (JSON): per
treatment the medians over rounds and ``p99_vs_none``, the median of each round's p99 over the
same round's ``none``. Needs root, cgroup v1's cpu hierarchy with ``cpu.idle``, and gcc.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from isolation import CPU_ROOT, in_cgroups
from round_order import round_order

SOURCES = Path(__file__).resolve().with_name("sched_probe")
TREATMENTS = ("none", "shares2", "pod_idle", "parent_idle", "pod_idle_quota", "outside_kubepods")
DAEMONS = {"slice": ("system.slice", 2, ("3000", "2000")), "root": (None, 8, ("500", "4000")),
           "quiet": (None, 0, ())}
#: the layout below the node cgroup: directory -> cpu.shares
LAYOUT = {"system.slice": 1024, "kubepods": 2048, "kubepods/burstable": 1024, "kubepods/burstable/ls": 1024,
          "kubepods/besteffort": 2, "kubepods/besteffort/be": 2, "beroot": 2}
FLOOR_QUOTA_US = 20000  # 0.2 CPU of a 100 ms period


def log(message: str) -> None:
    print(f"[bench-sched-probe] {message}", file=sys.stderr, flush=True)


def build(workdir: Path) -> dict[str, Path]:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise SystemExit("gcc is missing: run this through `make bench-sched-probe`, which installs it")
    out = {}
    for name in ("probe", "hog"):
        out[name] = workdir / name
        subprocess.run([gcc, "-O2", "-Wall", "-o", str(out[name]), str(SOURCES / f"{name}.c")], check=True)
    return out


#: the treatments --slice-us adds (the online task with a short slice)
SLICED = ("none", "shares2", "pod_idle")


def treatments(slice_us: int) -> tuple[str, ...]:
    """Every treatment of a run (pure): with a slice, each of SLICED followed by its sliced twin."""
    if not slice_us:
        return TREATMENTS
    return tuple(x for t in TREATMENTS for x in ((t, f"{t}_slice") if t in SLICED else (t,)))


def set_treatment(node: Path, name: str) -> str | None:
    """Writes the treatment's cpu files (after undoing the last one); returns where BE runs."""
    name = name.removesuffix("_slice")
    be = node / "kubepods/besteffort"
    (be / "cpu.cfs_quota_us").write_text("-1")
    for d in (be, be / "be", node / "beroot"):
        (d / "cpu.idle").write_text("0")
    if name == "none":
        return None
    if name in ("pod_idle", "parent_idle", "pod_idle_quota"):
        (be / "be/cpu.idle").write_text("1")
    if name == "parent_idle":
        (be / "cpu.idle").write_text("1")
    if name == "pod_idle_quota":
        (be / "cpu.cfs_quota_us").write_text(str(FLOOR_QUOTA_US))
    if name == "outside_kubepods":
        (node / "beroot/cpu.idle").write_text("1")
        return "beroot"
    return "kubepods/besteffort/be"


def cpu_seconds(pids: list[int]) -> float:
    return sum(int(Path(f"/proc/{p}/schedstat").read_text().split()[0]) for p in pids) / 1e9


def spawn(argv: list[str], cgroup: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, preexec_fn=in_cgroups([cgroup]))


def medians(rows: list[dict], nones: list[dict]) -> dict:
    """Per treatment: medians over rounds, and the median of each round's p99 over that round's
    ``none`` (pure)."""
    out = {k: round(statistics.median(r[k] for r in rows), 2)
           for k in ("p50_us", "p99_us", "p999_us", "be_cpus", "daemons_cpus")}
    ratios = [r["p99_us"] / n["p99_us"] for r, n in zip(rows, nones) if n["p99_us"] > 0]
    out["p99_vs_none"] = round(statistics.median(ratios), 2) if ratios else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10, help="the probe's measured seconds per treatment")
    parser.add_argument("--slice-us", type=int, default=0,
                        help="also run none, shares2 and pod_idle with the online task at this EEVDF slice (µs, "
                             "100-100000; 0: not)")
    parser.add_argument("--daemons", choices=sorted(DAEMONS), default="slice",
                        help="where the daemons' hogs run: slice (system.slice beside kubepods), root (loose), "
                             "quiet (no daemons)")
    args = parser.parse_args()
    if args.slice_us and not 100 <= args.slice_us <= 100_000:
        parser.error(f"--slice-us {args.slice_us}: the kernel's range is 100 to 100000")
    if os.geteuid() != 0:
        raise SystemExit("bench-sched-probe needs root: it creates cgroups and moves processes into them")
    if not (CPU_ROOT / "cpu.idle").exists():
        raise SystemExit(f"bench-sched-probe needs cgroup v1's cpu hierarchy with cpu.idle at {CPU_ROOT}")
    workdir = Path(tempfile.mkdtemp(prefix="tidal-sched-probe-"))
    tools = build(workdir)
    node = CPU_ROOT / f"tidal-sched-probe-{secrets.token_hex(4)}"
    created: list[Path] = []
    daemons: list[subprocess.Popen] = []
    names = treatments(args.slice_us)
    results: dict[str, list[dict]] = {t: [] for t in names}
    cpus = os.cpu_count() or 1
    try:
        for rel, shares in {"": 1024, **LAYOUT}.items():
            d = node / rel
            d.mkdir()
            created.append(d)
            (d / "cpu.shares").write_text(str(shares))
        where, count, hog_args = DAEMONS[args.daemons]
        daemons = [spawn([str(tools["hog"]), *hog_args], node / where if where else CPU_ROOT) for _ in range(count)]
        log(f"{count} daemon hogs in {node / where if where else CPU_ROOT}; {args.rounds} rounds of "
            f"{len(names)} treatments, {args.seconds:g} s each")
        for round_ in range(args.rounds):
            for name in round_order(names, round_, "balanced"):
                where_be = set_treatment(node, name)
                hogs = [spawn([str(tools["hog"]), "1000000", "0"], node / where_be) for _ in range(cpus)] \
                    if where_be else []
                try:
                    be0, d0 = cpu_seconds([h.pid for h in hogs]), cpu_seconds([d.pid for d in daemons])
                    t0 = os.times().elapsed
                    probe = subprocess.run([str(tools["probe"]), f"{args.seconds:g}", "1000", "200",
                                            str(args.slice_us if name.endswith("_slice") else 0)],
                                           preexec_fn=in_cgroups([node / "kubepods/burstable/ls"]),
                                           capture_output=True, text=True, check=True)
                    wall = os.times().elapsed - t0
                    be_cpus = (cpu_seconds([h.pid for h in hogs]) - be0) / wall
                    daemons_cpus = (cpu_seconds([d.pid for d in daemons]) - d0) / wall
                finally:
                    for h in hogs:
                        h.kill()
                        h.wait()
                p50, p99, p999 = map(float, probe.stdout.split())
                row = {"round": round_ + 1, "treatment": name, "p50_us": p50, "p99_us": p99, "p999_us": p999,
                       "be_cpus": round(be_cpus, 2), "daemons_cpus": round(daemons_cpus, 2)}
                results[name].append(row)
                print(json.dumps(row), flush=True)
    finally:
        for d in daemons:
            d.kill()
            d.wait()
        if len(created) == len(LAYOUT) + 1:
            set_treatment(node, "none")  # an idle group refuses cpu.shares; rmdir does not care, but be tidy
        for d in reversed(created):
            d.rmdir()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {name: medians(rows, results["none"]) for name, rows in results.items()}
    summary["settings"] = {"daemons": args.daemons, "slice_us": args.slice_us, "rounds": args.rounds,
                           "seconds": args.seconds, "kernel": os.uname().release}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
