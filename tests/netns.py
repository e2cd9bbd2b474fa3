"""Two network namespaces joined by a veth pair: two "machines" on one host, off its real interfaces.

``pair()`` makes ``exnt-<pid>-a`` (10.231.0.1) and ``exnt-<pid>-b`` (10.231.0.2), each with ``lo``
up and a default route through the veth, so a program that finds its own address by the route out
(Ray does) finds the veth's. Nothing in them reaches the host's interfaces, and two runs at once do
not collide (each pair is a private link). ``Machine.die()`` is a machine dying: its link goes down
first (nothing more leaves it, not even a FIN), then every process in it is SIGKILLed. Leftovers of
a test process that is gone are removed first; everything is removed at the end, whatever happened.
Needs root and iproute2 (``ip netns``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

PREFIX = "exnt"  # namespaces exnt-<pid>-a/b, links xn<pid>a/b: <pid> is the test process that owns them
SUBNET = "10.231.0"
OWNED = re.compile(rf"{PREFIX}-(\d+)-\w+")
LINK = re.compile(r"xn(\d+)[ab]")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "delete", probe, check=False)
    return None


@dataclass(frozen=True)
class Machine:
    """One namespace: its name, its address on the pair's link, and the link's name inside it."""

    name: str
    address: str
    link: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def pids(self) -> list[int]:
        """The processes running in this namespace."""
        return [int(pid) for pid in _ip("netns", "pids", self.name, check=False).stdout.split()]

    def die(self) -> None:
        """Cut the link, then SIGKILL every process inside (again while any is left: a parent may be forking)."""
        _ip("-n", self.name, "link", "set", self.link, "down", check=False)
        _kill_all(self)


def _kill_all(machine: Machine) -> None:
    for _ in range(20):
        pids = machine.pids()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(name: str) -> None:
    _kill_all(Machine(name=name, address="", link=""))
    _ip("netns", "delete", name, check=False)


def remove_stale() -> None:
    """Remove the namespaces and links of test processes that are gone (or of this one: a retry)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        owner = OWNED.fullmatch(name)
        if owner and (int(owner.group(1)) == os.getpid() or not _alive(int(owner.group(1)))):
            _remove(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        fields = line.split(":")
        link = fields[1].strip().split("@")[0] if len(fields) > 1 else ""
        owner = LINK.fullmatch(link)
        if owner and (int(owner.group(1)) == os.getpid() or not _alive(int(owner.group(1)))):
            _ip("link", "delete", link, check=False)


@contextmanager
def pair() -> Iterator[tuple[Machine, Machine]]:
    """Two namespaces on one private link; removed (every process in them killed) on the way out."""
    remove_stale()
    pid = os.getpid()
    machines = tuple(
        Machine(name=f"{PREFIX}-{pid}-{side}", address=f"{SUBNET}.{n}", link=f"xn{pid}{side}")
        for n, side in ((1, "a"), (2, "b"))
    )
    a, b = machines
    try:
        for machine in machines:
            _ip("netns", "add", machine.name)
        _ip("link", "add", a.link, "type", "veth", "peer", "name", b.link)
        for machine in machines:
            _ip("link", "set", machine.link, "netns", machine.name)
            _ip("-n", machine.name, "addr", "add", f"{machine.address}/24", "dev", machine.link)
            _ip("-n", machine.name, "link", "set", "lo", "up")
            _ip("-n", machine.name, "link", "set", machine.link, "up")
        for machine, peer in ((a, b), (b, a)):
            _ip("-n", machine.name, "route", "add", "default", "via", peer.address)
        yield a, b
    finally:
        for machine in machines:
            _remove(machine.name)
        with contextlib.suppress(subprocess.SubprocessError):
            _ip("link", "delete", a.link, check=False)  # only if the pair was never moved into the namespaces
