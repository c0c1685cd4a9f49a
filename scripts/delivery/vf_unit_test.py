"""examples/vfs/kube-rdma-vfs@.service, the VF creation docs/install.md gives (scripts/test-delivery
runs these; also runnable alone, as root: `python3 scripts/delivery/vf_unit_test.py`).

- `systemd-analyze verify` of an instance prints nothing (an unknown key or a missing program is
  only a warning there, so any output fails).
- It runs before the kubelet, is enabled by multi-user.target, and has no ExecStop (stopping it
  must not remove VFs from under pods).
- Its Exec lines, as systemd expands them for an instance (specifiers, `$$`), run verbatim on a
  fake sysfs bind-mounted over /sys/bus/pci/devices in a private mount namespace: they write
  NUM_VFS to that PF's sriov_numvfs (a new count, a changed count), leave a right count
  unwritten, touch no other PF, and give up naming the PF after 60 one-second waits for a driver.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402

UNIT = chart.ROOT / "examples" / "vfs" / "kube-rdma-vfs@.service"
PF, OTHER = "0000:3b:00.0", "0000:3b:00.1"
PCI_DEVICES = "/sys/bus/pci/devices"


def unit() -> dict[str, list[tuple[str, str]]]:
    """Section -> (key, value) lines in order (systemd allows a key more than once)."""
    out: dict[str, list[tuple[str, str]]] = {}
    section = ""
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, [])
            continue
        key, _, value = line.partition("=")
        out[section].append((key.strip(), value.strip()))
    return out


def values(section: str, key: str) -> list[str]:
    return [w for k, v in unit().get(section, []) if k == key for w in v.split()]


def expand(line: str, instance: str) -> list[str]:
    """An Exec line as systemd runs it for `instance`: specifiers %I, %i, %% and `$$` (a literal
    `$` for the shell). Any other specifier or a systemd `$VAR` fails: this model would not know it."""
    bare = line.replace("%%", "").replace("$$", "")
    assert not re.search(r"%[^Ii]", bare), f"a specifier this test does not expand: {line}"
    assert "$" not in bare, f"a systemd variable expansion this test does not model: {line}"
    out = re.sub(r"%%|%I|%i|\$\$", lambda m: {"%%": "%", "%I": instance, "%i": instance, "$$": "$"}[m.group(0)], line)
    return shlex.split(out)


def run_unit(sysfs: Path, bin_dir: Path, num_vfs: str) -> subprocess.CompletedProcess[str]:
    """ExecStartPre then ExecStart of instance PF, each in a mount namespace of its own with
    `sysfs` over /sys/bus/pci/devices; stops at the first that fails, as systemd does."""
    env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "NUM_VFS": num_vfs}
    res = subprocess.CompletedProcess([], 0, "", "")
    for key in ("ExecStartPre", "ExecStart"):
        for _, line in (kv for kv in unit()["Service"] if kv[0] == key):
            argv = expand(line, PF)
            res = subprocess.run(["unshare", "-m", "/bin/sh", "-c", f'mount --bind "$0" {PCI_DEVICES} && exec "$@"',
                                  str(sysfs), *argv], env=env, capture_output=True, text=True, timeout=30)
            if res.returncode != 0:
                return res
    return res


def fake_node(root: Path, numvfs: dict[str, str], bound: bool = True) -> Path:
    """A /sys/bus/pci/devices with the PFs of `numvfs` (their current counts), and a `sleep`
    that only counts its calls (the driver wait takes no time)."""
    sysfs = root / "devices"
    for bdf, cur in numvfs.items():
        d = sysfs / bdf
        d.mkdir(parents=True)
        (d / "sriov_numvfs").write_text(cur + "\n")
        (d / "sriov_totalvfs").write_text("16\n")
        if bound:
            (root / "driver").mkdir(exist_ok=True)
            (d / "driver").symlink_to(root / "driver")
        os.utime(d / "sriov_numvfs", (1_600_000_000, 1_600_000_000))
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "sleep").write_text(f"#!/bin/sh\necho \"$1\" >> {root / 'slept'}\n")
    (bin_dir / "sleep").chmod(0o755)
    return sysfs


def test_systemd_analyze_verify() -> str:
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze is not installed (Debian: apt-get install systemd)"
    with tempfile.TemporaryDirectory(prefix="kube-rdma-unit-") as tmp:
        shutil.copy2(UNIT, Path(tmp) / UNIT.name)
        # An instance name without ':': verify reads `PATH:ALIAS` (systemd runs a PCI address fine).
        res = subprocess.run([exe, "verify", "--man=no", str(Path(tmp) / "kube-rdma-vfs@pf0.service")],
                             capture_output=True, text=True, env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 0 and not out, f"systemd-analyze verify -> {res.returncode}:\n{out}"
    return "clean"


def test_ordered_before_kubelet() -> str:
    assert "kubelet.service" in values("Unit", "Before"), "not ordered before kubelet.service"
    assert values("Service", "Type") == ["oneshot"] and values("Service", "RemainAfterExit") == ["yes"]
    assert "multi-user.target" in values("Install", "WantedBy"), "not enabled by multi-user.target"
    assert not values("Service", "ExecStop"), "an ExecStop would remove VFs from under running pods at shutdown"
    return "Before=kubelet.service, WantedBy=multi-user.target, no ExecStop"


def test_writes_sriov_numvfs_of_its_pf() -> str:
    assert os.geteuid() == 0, "needs root (a private mount namespace)"
    seen = []
    for cur in ("0", "4", "8"):
        with tempfile.TemporaryDirectory(prefix="kube-rdma-vfs-") as tmp:
            sysfs = fake_node(Path(tmp), {PF: cur, OTHER: "2"})
            before = (sysfs / PF / "sriov_numvfs").stat().st_mtime
            res = run_unit(sysfs, Path(tmp) / "bin", "8")
            assert res.returncode == 0, f"from {cur}: {res.returncode} {res.stderr}"
            got = (sysfs / PF / "sriov_numvfs").read_text().strip()
            assert got == "8", f"from {cur}: sriov_numvfs is {got}, not 8"
            assert (sysfs / OTHER / "sriov_numvfs").read_text().strip() == "2", "another PF's count changed"
            if cur == "8":
                assert (sysfs / PF / "sriov_numvfs").stat().st_mtime == before, "a right count was written again"
            seen.append(f"{cur}->{got}")
    return ", ".join(seen)


def test_gives_up_without_a_driver() -> str:
    assert os.geteuid() == 0, "needs root (a private mount namespace)"
    with tempfile.TemporaryDirectory(prefix="kube-rdma-vfs-") as tmp:
        sysfs = fake_node(Path(tmp), {PF: "0"}, bound=False)
        res = run_unit(sysfs, Path(tmp) / "bin", "8")
        assert res.returncode != 0 and PF in res.stderr, f"{res.returncode} {res.stderr!r}"
        slept = (Path(tmp) / "slept").read_text().split()
        assert slept == ["1"] * 60, f"waited {slept}, not 60 x 1 s"
        assert (sysfs / PF / "sriov_numvfs").read_text().strip() == "0", "wrote sriov_numvfs with no driver bound"
    return res.stderr.strip()


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("VF unit: systemd-analyze verify is clean", test_systemd_analyze_verify),
    ("VF unit: before the kubelet, no ExecStop", test_ordered_before_kubelet),
    ("VF unit: writes NUM_VFS to its PF's sriov_numvfs (fake sysfs)", test_writes_sriov_numvfs_of_its_pf),
    ("VF unit: gives up after 60 s without a PF driver, naming the PF", test_gives_up_without_a_driver),
]


if __name__ == "__main__":
    sys.exit(chart.run_checks(CHECKS))
