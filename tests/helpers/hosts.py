"""Several hosts on one machine: network namespaces on one bridge, each with its own directory.

    with Hosts(3, tmp_path) as hosts:
        server = hosts[0].popen([*CARDINAL, "server", "--host", "0.0.0.0", ...])
        worker = hosts[2].popen([...], env={..., "MASTER_ADDR": hosts[0].address})

Each host is a namespace with one veth on a bridge in the root namespace and an address of its
own in a /24 picked at random (so tests running side by side never share one), its loopback up,
and a directory ``tmp_path / host-I`` no other host is told of. A process started with ``popen``
runs inside its host (``ip netns exec``) and sees only the bridge: another host's 127.0.0.1 is
out of reach, as on real machines. ``shape`` puts a rate (and, where the kernel has netem, a
delay) on what a host sends (``tc``). On exit every process started here is killed and every
namespace and link removed, whether the block failed or not. ``unavailable()`` says why the
machine cannot do this (not root, no ``ip``), for a test to skip with.
"""

import os
import secrets
import shutil
import subprocess
from pathlib import Path


def unavailable() -> str | None:
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


class Host:
    def __init__(self, netns: str, address: str, directory: Path, device: str):
        self.netns, self.address, self.dir, self.device = netns, address, directory, device
        self.procs: list[subprocess.Popen] = []

    def popen(self, cmd: list[str], **kwargs) -> subprocess.Popen:
        """``cmd`` inside this host; killed when the hosts are removed."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.netns, *cmd], **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.netns, *cmd], **kwargs)

    def shape(self, rate_mbit: float, delay_ms: float = 0.0) -> None:
        """What this host sends leaves at most ``rate_mbit`` Mbit/s (a token bucket, ``tbf``) and,
        with ``delay_ms``, after that delay (``netem``, under the bucket). Each host shapes its own
        sending side: shape both ends of a link for both directions. Kernels without ``sch_netem``
        (this machine's and CI's) take a rate only; a delay there is refused, naming why."""
        burst = max(32 * 1024, int(rate_mbit * 1e6 / 8 / 250))  # a 4 ms burst, at least 32 KiB
        tbf = ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "50ms"]
        if not delay_ms:
            self._tc("qdisc", "replace", "dev", "eth0", "root", *tbf)
            return
        self._tc("qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "netem", "delay", f"{delay_ms}ms")
        self._tc("qdisc", "replace", "dev", "eth0", "parent", "1:", "handle", "2:", *tbf)

    def unshape(self) -> None:
        """What this host sends leaves at the bridge's own rate again (no qdisc of ours)."""
        self.run(["tc", "qdisc", "del", "dev", "eth0", "root"], capture_output=True)  # none there: nothing to do

    def _tc(self, *args: str) -> None:
        done = self.run(["tc", *args], capture_output=True, text=True)
        if done.returncode:
            kind = " (this kernel has no sch_netem: shape a rate alone)" if "netem" in args else ""
            raise RuntimeError(f"tc {' '.join(args)} failed{kind}: {done.stderr.strip()}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


class Hosts:
    def __init__(self, n: int, root: Path):
        if not 1 <= n <= 200:
            raise ValueError(f"between 1 and 200 hosts, got {n}")
        self.n, self.root = n, Path(root)
        self.tag = secrets.token_hex(3)
        r = int(self.tag, 16)
        self.subnet = f"10.{100 + r % 100}.{(r >> 8) % 256}"
        self.bridge = f"cb-{self.tag}"
        self.hosts: list[Host] = []
        self.made_bridge = False

    def __enter__(self) -> "Hosts":
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self.made_bridge = True
            _ip("link", "set", self.bridge, "up")
            for i in range(self.n):
                self._add(i)
        except BaseException:
            self.remove()
            raise
        return self

    def _add(self, i: int) -> None:
        netns, outside, inside = f"cardinal-{self.tag}-{i}", f"cv-{self.tag}-{i}", f"ch-{self.tag}-{i}"
        directory = self.root / f"host-{i}"
        directory.mkdir(parents=True, exist_ok=True)
        _ip("netns", "add", netns)
        host = Host(netns, f"{self.subnet}.{i + 1}", directory, outside)
        self.hosts.append(host)  # removed on failure from here on
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", netns)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        for args in (["link", "set", "lo", "up"], ["link", "set", inside, "name", "eth0"],
                     ["addr", "add", f"{host.address}/24", "dev", "eth0"], ["link", "set", "eth0", "up"]):
            _ip("-n", netns, *args)

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        """Kill every process started on a host, then remove the namespaces, their links and the bridge."""
        for host in self.hosts:
            host.stop()
        for host in self.hosts:
            _ip("netns", "del", host.netns, check=False)  # its veth pair goes with it
            _ip("link", "del", host.device, check=False)
        if self.made_bridge:
            _ip("link", "del", self.bridge, check=False)

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __iter__(self):
        return iter(self.hosts)

    def leftovers(self) -> list[str]:
        """Namespaces and links of these hosts still present (none after ``remove``)."""
        names = _ip("netns", "list").stdout + _ip("link", "show").stdout
        return sorted({word.split("@")[0].rstrip(":") for word in names.split() if self.tag in word})
