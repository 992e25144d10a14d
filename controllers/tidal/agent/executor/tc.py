# SPDX-License-Identifier: Apache-2.0
"""tc and ip writes: pods' egress shaping on the host side of their veths (BE pods, and online
pods with their own limit).

How (:class:`TcShaper`, the same on cgroup v1 and v2, needing neither net_cls nor the pod's
cooperation): traffic a pod sends arrives on its host veth's *ingress*; an ``ingress`` qdisc
there redirects it (u32 match-all, ``mirred``) to an IFB device ``tfb<veth ifindex>`` whose root
TBF qdisc holds it to the rate — the way the CNI bandwidth plugin shapes pod egress.

Only ``tfb<N>`` IFB devices are ever created or deleted, and only the ``ffff:`` ingress qdisc of
a veth is added or removed (:func:`_check_shape`). Nothing is journalled: the state is in the
device names, so removing every ``tfb*`` device (and the ingress qdisc on its veth) undoes
everything, also for a restarted agent or ``tidal-agent restore``.

:class:`TcShaper` also offers the reads the egress feature senses with (``host_veth``).
"""
from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["IFB_PREFIX", "TcExecutor", "TcShape", "TcShapeOnly", "TcShaper", "TcUnshapeAll", "UnsafeShapeError",
           "parse_link_indexes", "parse_link_peers"]

log = logging.getLogger(__name__)

IFB_PREFIX = "tfb"

_LINK = re.compile(r"^\d+:\s+([^:@\s]+)(?:@if(\d+))?:")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def parse_link_peers(text: str) -> dict[str, int]:
    """``ip -o link`` inside a pod: interface -> host-side peer ifindex (veths only)."""
    out = {}
    for line in text.splitlines():
        m = _LINK.match(line)
        if m and m[2] and m[1] != "lo":
            out[m[1]] = int(m[2])
    return out


def parse_link_indexes(text: str) -> dict[int, str]:
    """``ip -o link`` on the host: ifindex -> name (``veth1@if2`` -> ``veth1``)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\d+):\s+([^:@\s]+)", line)
        if m:
            out[int(m[1])] = m[2]
    return out


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


class TcShaper:
    """tc and ip on the host (the I/O of egress shaping)."""

    def rate_of(self, ifb: str) -> int | None:
        """The TBF rate on an IFB device (bits/s), None when it has none."""
        try:
            text = _run("tc", "-j", "qdisc", "show", "dev", ifb)
        except RuntimeError:
            return None
        for q in json.loads(text or "[]"):
            if q.get("kind") == "tbf":
                return int((q.get("options") or {}).get("rate", 0)) * 8 or None
        return None

    def shape(self, veth: str, ifindex: int, bits_per_second: int) -> None:
        ifb = f"{IFB_PREFIX}{ifindex}"
        if not Path(f"/sys/class/net/{ifb}").exists():
            _run("ip", "link", "add", ifb, "type", "ifb")
        _run("ip", "link", "set", ifb, "up")
        burst = max(32 * 1024, bits_per_second // 8 // 50)  # 20 ms at the rate, at least 32 KiB
        _run("tc", "qdisc", "replace", "dev", ifb, "root", "tbf", "rate", f"{bits_per_second}bit",
             "burst", str(burst), "latency", "100ms")
        qdiscs = _run("tc", "qdisc", "show", "dev", veth)
        if "ingress ffff:" not in qdiscs:
            _run("tc", "qdisc", "add", "dev", veth, "handle", "ffff:", "ingress")
        filters = _run("tc", "filter", "show", "dev", veth, "parent", "ffff:")
        if f"Egress Redirect to device {ifb}" not in filters:
            _run("tc", "filter", "replace", "dev", veth, "parent", "ffff:", "protocol", "all", "prio", "1",
                 "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb)

    def shaped(self) -> dict[int, str]:
        """veth ifindex -> IFB device, for every ``tfb<N>`` device on the host."""
        out = {}
        for dev in Path("/sys/class/net").iterdir():
            if dev.name.startswith(IFB_PREFIX) and dev.name[len(IFB_PREFIX):].isdigit():
                out[int(dev.name[len(IFB_PREFIX):])] = dev.name
        return out

    def unshape(self, ifindex: int) -> None:
        names = parse_link_indexes(_run("ip", "-o", "link", "show"))
        veth = names.get(ifindex)
        if veth is not None:
            subprocess.run(["tc", "qdisc", "del", "dev", veth, "handle", "ffff:", "ingress"],
                           capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", f"{IFB_PREFIX}{ifindex}"], capture_output=True, timeout=10)

    def host_veth(self, pid: int) -> tuple[str, int] | None:
        """(host-side veth name, its ifindex) of the network namespace of ``pid`` (a read)."""
        try:
            peers = parse_link_peers(_run("nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-o", "link", "show"))
        except (RuntimeError, OSError):
            return None
        if not peers:
            return None
        ifindex = peers.get("eth0") or sorted(peers.values())[0]
        name = parse_link_indexes(_run("ip", "-o", "link", "show")).get(ifindex)
        return None if name is None else (name, ifindex)


class UnsafeShapeError(ValueError):
    """A shaping intent naming something other than a host veth and its ``tfb<N>`` device."""


@dataclass(frozen=True)
class TcShape:
    """Egress of the pod behind host veth ``veth`` (ifindex ``ifindex``) held to ``bits_per_second``."""

    veth: str
    ifindex: int
    bits_per_second: int

    @property
    def key(self) -> str:
        return f"tc:{IFB_PREFIX}{self.ifindex}"


@dataclass(frozen=True)
class TcShapeOnly:
    """Exactly ``shapes`` are shaped: every other ``tfb*`` device goes."""

    shapes: tuple[TcShape, ...]
    key: str = "tc"


@dataclass(frozen=True)
class TcUnshapeAll:
    """No ``tfb*`` device (nor its veth's ingress qdisc) is left."""

    key: str = "tc"


def _check_shape(shape: TcShape) -> None:
    if not isinstance(shape.ifindex, int) or shape.ifindex <= 0:
        raise UnsafeShapeError(f"{shape}: ifindex must be a positive integer")
    if not _NAME.match(shape.veth) or shape.veth.startswith(IFB_PREFIX):
        raise UnsafeShapeError(f"{shape}: {shape.veth!r} is not a host veth name")


class TcExecutor:
    def __init__(self, shaper: TcShaper | None = None) -> None:
        self.shaper = shaper or TcShaper()
        #: veth ifindex -> bits/s this run set (a rate already there is not set again)
        self.applied: dict[int, int] = {}

    def execute(self, intents: Sequence[object], done: set[str], problems: list[tuple[str, str]]) -> None:
        for intent in intents:
            if isinstance(intent, TcShapeOnly):
                for shape in intent.shapes:
                    _check_shape(shape)
        for intent in intents:
            if isinstance(intent, TcUnshapeAll):
                problems += [("tc", p) for p in self.undo()]
            elif isinstance(intent, TcShapeOnly):
                self._shape_only(intent.shapes, done, problems)

    def _shape_only(self, shapes: tuple[TcShape, ...], done: set[str], problems: list[tuple[str, str]]) -> None:
        wanted = set()
        for shape in shapes:
            wanted.add(shape.ifindex)
            if self.applied.get(shape.ifindex) == shape.bits_per_second:
                continue
            try:
                self.shaper.shape(shape.veth, shape.ifindex, max(shape.bits_per_second, 8000))
                self.applied[shape.ifindex] = shape.bits_per_second
                done.add(shape.key)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
                problems.append((shape.veth, str(err)))
        for ifindex in set(self.shaper.shaped()) - wanted:
            self.shaper.unshape(ifindex)
            self.applied.pop(ifindex, None)

    def undo(self) -> list[str]:
        problems = []
        for ifindex in self.shaper.shaped():
            try:
                self.shaper.unshape(ifindex)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
                problems.append(str(err))
        self.applied.clear()
        return problems
