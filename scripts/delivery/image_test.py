"""The image, built with podman from statically linked binaries, and the binaries in it
(scripts/test-delivery runs these last; also runnable alone: `python3 scripts/delivery/image_test.py`).

- scripts/delivery/build-dist builds static binaries (no ELF interpreter: they run FROM scratch)
  with the VERSION build arg; podman builds the image offline, labelled with that version, as
  user 65532.
- In the image: each binary's --version shows VERSION; every command line the chart renders
  parses; the device plugin accepts the chart's pool config, both rawConfig formats and the
  README's pools.yaml on simulated nodes; the CNI installs itself as the init container does
  and parses every NAD config; the agent checks the example RoceProfile and emits an
  RdmaNodeState that fits the CRD.

KUBE_RDMA_STATIC_TARGET_DIR overrides where the static binaries are built.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import dra  # noqa: E402
import migration_test  # noqa: E402
import security  # noqa: E402
import validate_test  # noqa: E402


BINARIES = ["kube-rdma-device-plugin", "kube-rdma-cni", "kube-rdma-operator", "kubectl-rdma"]


def workspace_version() -> str:
    text = (chart.ROOT / "Cargo.toml").read_text(encoding="utf-8")
    m = re.search(r'\[workspace\.package\][^\[]*?version\s*=\s*"([^"]+)"', text, re.S)
    assert m, "no [workspace.package] version in Cargo.toml"
    return m.group(1)


def static_target_dir() -> Path:
    return Path(os.environ.get("KUBE_RDMA_STATIC_TARGET_DIR") or chart.ROOT / "target-static")


def elf_interpreter(path: Path) -> str | None:
    """The PT_INTERP of a 64-bit little-endian ELF file (None: static, runs without ld.so).

    Layout from the ELF spec (elf(5)): e_phoff at 0x20, e_phentsize at 0x36, e_phnum at 0x38; each
    program header starts with p_type (PT_INTERP = 3), p_offset at +8, p_filesz at +32.
    """
    import struct

    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path}: not a 64-bit LE ELF file"
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        base = phoff + i * phentsize
        p_type, = struct.unpack_from("<I", data, base)
        if p_type == 3:
            off, = struct.unpack_from("<Q", data, base + 8)
            size, = struct.unpack_from("<Q", data, base + 32)
            return data[off:off + size].rstrip(b"\0").decode()
    return None


# The image the tests build: a version of its own, so --version proves the VERSION build arg
# reaches the binaries (KUBE_RDMA_VERSION at compile time) rather than the crate version. The e2e
# tier builds its image with the same one (E2E_VERSION in e2e/src/images.rs): one static build.
IMAGE_VERSION = f"{workspace_version()}-test.1"


def dist_dir() -> Path:
    return static_target_dir() / "dist-delivery"


def build_static(version: str) -> str:
    """scripts/delivery/build-dist --debug with VERSION: what a user runs (release by default;
    debug here because a release build of four binaries takes 15 CPU-minutes)."""
    res = subprocess.run([str(chart.ROOT / "scripts" / "delivery" / "build-dist"), "--debug", "--out", str(dist_dir())],
                         cwd=chart.ROOT, env={**os.environ, "VERSION": version}, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    for b in BINARIES:
        interp = elf_interpreter(dist_dir() / b)
        assert interp is None, f"{b} needs the dynamic loader {interp}: it cannot run FROM scratch"
    bad = subprocess.run([str(chart.ROOT / "scripts" / "delivery" / "build-dist"), "--arch", "sparc"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "sparc" in bad.stderr, bad.stderr
    return f"{len(BINARIES)} static binaries in {dist_dir()}"


PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


IMAGE = "localhost/kube-rdma"


def build_image(version: str) -> str:
    src = dist_dir()
    with tempfile.TemporaryDirectory(prefix="kube-rdma-image-") as ctx:
        # A small build context: the Dockerfile and dist/ only (the repo holds GBs of target dirs).
        dist = Path(ctx) / "dist"
        dist.mkdir()
        for b in BINARIES:
            shutil.copy2(src / b, dist / b)
        shutil.copy2(chart.ROOT / "Dockerfile", Path(ctx) / "Dockerfile")
        shutil.copy2(chart.ROOT / ".dockerignore", Path(ctx) / ".dockerignore")
        old = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", f"{IMAGE}:{version}"],
                             capture_output=True, text=True).stdout.strip()
        res = subprocess.run(PODMAN + ["build", "--pull=never", "--build-arg", f"VERSION={version}",
                                       "-t", f"{IMAGE}:{version}", ctx], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    new = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", f"{IMAGE}:{version}"],
                         capture_output=True, text=True).stdout.strip()
    if old and old != new:
        # Drop the image this build replaced, so repeated runs do not pile up layers.
        subprocess.run(["podman", "rmi", old], capture_output=True)
    info = json.loads(subprocess.run(["podman", "image", "inspect", f"{IMAGE}:{version}"],
                                     capture_output=True, text=True, check=True).stdout)[0]
    labels = info.get("Labels") or info.get("Config", {}).get("Labels") or {}
    assert labels.get("org.opencontainers.image.version") == version, labels
    user = info.get("User") or info.get("Config", {}).get("User")
    assert user == "65532:65532", f"image user {user!r}"
    return f"{IMAGE}:{version}, {info['Size'] / 1e6:.0f} MB"


def run_in_image(version: str, args: list[str], mounts: list[str] | None = None, *,
                 extra: list[str] | None = None, stdout_only: bool = False) -> str:
    cmd = PODMAN + ["run", "--rm", "--network", "none", "--read-only",
                    # podman's default rlimits exceed what this sandbox may set; ask for less.
                    "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768", *(extra or [])]
    for m in mounts or []:
        cmd += ["-v", m]
    res = subprocess.run(cmd + [f"{IMAGE}:{version}", *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{' '.join(args)} -> {res.returncode}\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
    return res.stdout if stdout_only else res.stdout + res.stderr


def test_binary_version(version: str, binary: str) -> str:
    out = run_in_image(version, [f"/usr/bin/{binary}", "--version"])
    assert version in out.split(), f"{binary} --version printed {out!r}, not {version}"
    return out.strip().splitlines()[0]


def device_plugin_config(values: dict[str, Any] | None) -> str:
    objs = chart.objects(chart.render(values))
    return next(o for o in objs if o["kind"] == "ConfigMap")["data"]["config.yaml"]


def discover_in_image(version: str, config: str, node: str, netns: str | None = None) -> dict[str, int]:
    """Run the image's device plugin discovery on a simulated node with `config` (in netns mode
    `netns`, see migration_test.example_node); resource -> devices."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-dp-") as tmp:
        Path(tmp, "config.yaml").write_text(config, encoding="utf-8")
        migration_test.example_node(tmp, node, netns)
        os.chmod(tmp, 0o755)
        out = run_in_image(version, ["/usr/bin/kube-rdma-device-plugin", "discover", "--output", "json",
                                     "--allow-empty-pools",
                                     "--config", "/cfg/config.yaml", "--sim", f"/cfg/{node}"],
                           [f"{tmp}:/cfg:ro"], stdout_only=True)
    report = json.loads(out)
    return {p["resource"]: len(p["devices"]) for p in report["pools"]}


def test_dp_accepts_chart_config(version: str) -> str:
    """The ConfigMap the chart renders is a config the real device plugin accepts and uses."""
    pools = discover_in_image(version, device_plugin_config(None), "cx6dx-dual.yaml")
    assert list(pools) == ["kuberdma.io/rdma_vfs"] and pools["kuberdma.io/rdma_vfs"] > 0, pools
    full = discover_in_image(version, device_plugin_config(chart.full_values()), "mixed.yaml")
    want = [f"{p.get('resourcePrefix', 'kuberdma.io')}/{p['name']}" for p in chart.full_values()["pools"]]
    assert sorted(full) == sorted(want), f"{full} != {want}"
    return f"default on cx6dx-dual: {pools}; full values: {len(full)} pools"


def test_dp_accepts_raw_sriovdp_config(version: str) -> str:
    raw = (chart.FIXTURES / "sriovdp-config.json").read_text(encoding="utf-8")
    values = chart.merged(chart.default_values(), pools=[], rawConfig=raw)
    pools = discover_in_image(version, device_plugin_config(values), "cx6dx-dual.yaml")
    # sriov-network-device-plugin's default prefix (intel.com) is kept for the pool that sets none.
    assert set(pools) == {"kuberdma.io/cx6_vf", "intel.com/e810_vf"}, pools
    assert pools["kuberdma.io/cx6_vf"] > 0, pools
    return str(pools)


def test_dp_accepts_raw_rdma_shared_config(version: str) -> str:
    raw = (chart.FIXTURES / "rdma-shared-dev-plugin-config.json").read_text(encoding="utf-8")
    values = chart.merged(chart.default_values(), pools=[], rawConfig=raw)
    pools = discover_in_image(version, device_plugin_config(values), "cx6dx-dual.yaml", "shared")
    # k8s-rdma-shared-dev-plugin's prefix (rdma) is kept; one PF's HCA shared 16 ways.
    assert pools == {"rdma/hca_shared_devices_a": 16}, pools
    return str(pools)


def test_chart_command_lines(version: str) -> str:
    """Every command line the chart renders (default and full values) is accepted by the binary
    in the image: clap rejects an unknown flag or a bad value before it acts on a trailing --help."""
    seen = set()
    for values in (None, chart.full_values(), chart.ci_values("rbac-proxy-values.yaml"), dra.dra_values()):
        for o in chart.objects(chart.render(values)):
            if o["kind"] not in security.WORKLOAD_KINDS:
                continue
            spec = security.pod_spec(o)
            for c in spec.get("initContainers", []) + spec.get("containers", []):
                if c["name"] == "kube-rbac-proxy":
                    continue  # not our image
                line = tuple(c["command"] + c.get("args", []))
                if line[0].endswith("kube-rdma-cni"):
                    continue  # not clap; its `install` runs for real in another check
                seen.add(line)
    for line in sorted(seen):
        run_in_image(version, [*line, "--help"])
    return f"{len(seen)} distinct command lines"


def test_readme_pools_in_image(version: str) -> str:
    pools_yaml, _ = chart.readme_values()
    pools = discover_in_image(version, pools_yaml, "cx6dx-dual.yaml")
    assert pools.get("kuberdma.io/rdma_vfs", 0) > 0, pools
    return f"README pools.yaml on cx6dx-dual: {pools}"


def test_cni_install_in_image(version: str) -> str:
    """The init container's command: as root without capabilities, into a host-like directory."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-cnibin-") as tmp:
        Path(tmp, "kube-rdma-cni").write_bytes(b"old version")
        run_in_image(version, ["/usr/bin/kube-rdma-cni", "install", "--dest", "/host/cni-bin"],
                     [f"{tmp}:/host/cni-bin"], extra=["--user", "0:0", "--cap-drop", "all",
                                                      "--security-opt", "no-new-privileges"])
        installed = Path(tmp, "kube-rdma-cni")
        want = (dist_dir() / "kube-rdma-cni").read_bytes()
        assert installed.read_bytes() == want, "installed binary differs from the image's"
        assert os.access(installed, os.X_OK), "installed binary is not executable"
        leftovers = [p.name for p in Path(tmp).iterdir() if p.name != "kube-rdma-cni"]
        assert not leftovers, f"temp files left behind: {leftovers}"
    return "replaced an older kube-rdma-cni in place"


def test_cni_accepts_nad_configs(version: str) -> str:
    """Every NAD config (chart-rendered and example) passes the real plugin's config parser: CNI
    STATUS parses the config and answers 0 or 50 (no RDMA here), but 7 for an invalid config."""
    nads = [o for o in chart.objects(chart.render(chart.full_values())) if o["kind"] == "NetworkAttachmentDefinition"]
    nads += chart.load_examples()["network-attachment-definition.yaml"]
    nads += [o for o in chart.objects(chart.render(chart.readme_values()[1]))
             if o["kind"] == "NetworkAttachmentDefinition"]
    dra_mode = copy.deepcopy(chart.full_values())  # the same networks as the DRA driver's NADs
    dra_mode.setdefault("dra", {})["enabled"] = True
    nads += [o for o in chart.objects(chart.render(dra_mode, kube_version="1.34.0"))
             if o["kind"] == "NetworkAttachmentDefinition"]
    confs = [n["spec"]["config"] for n in nads]
    bad = json.dumps({"cniVersion": "1.1.0", "name": "bad", "type": "kube-rdma-cni", "mtu": 99999,
                      "ipam": {"type": "host-local"}})
    codes = []
    for conf in confs + [bad]:
        cmd = PODMAN + ["run", "--rm", "-i", "--network", "none", "--read-only", "--ulimit",
                        "nofile=20000:20000", "--ulimit", "nproc=32768:32768", "-e", "CNI_COMMAND=STATUS",
                        "-e", "CNI_PATH=/usr/bin", f"{IMAGE}:{version}", "/usr/bin/kube-rdma-cni"]
        res = subprocess.run(cmd, input=conf, capture_output=True, text=True, timeout=60)
        code = 0 if res.returncode == 0 and not res.stdout.strip() else json.loads(res.stdout).get("code")
        codes.append(code)
    assert all(c in (0, 50) for c in codes[:-1]), f"codes {codes[:-1]} for {confs}"
    assert codes[-1] == 7, f"an invalid config got code {codes[-1]}, not 7"
    return f"{len(confs)} config(s) parsed (codes {codes[:-1]}); mtu 99999 -> code 7"


def test_agent_once_in_image(version: str) -> str:
    """The example RoceProfile, read by the real agent (non-root, no capabilities) on a simulated
    node; its RdmaNodeState output must fit the chart's CRD."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-agent-") as tmp:
        shutil.copy2(chart.EXAMPLES / "roceprofile.yaml", Path(tmp, "profile.yaml"))
        shutil.copy2(chart.ROOT / "examples" / "nodes" / "cx6dx-dual.yaml", Path(tmp, "node.yaml"))
        os.chmod(tmp, 0o755)
        out = run_in_image(version, ["/usr/bin/kube-rdma-operator", "agent", "--once", "--output", "json",
                                     "--node-name", "node-a", "--sim", "/cfg/node.yaml",
                                     "--profile", "/cfg/profile.yaml"], [f"{tmp}:/cfg:ro"],
                           extra=["--cap-drop", "all"], stdout_only=True)
    state = json.loads(out)
    assert state["status"]["profile"] == "lossless-prio3", state["status"]["profile"]
    validate_test.validate_custom(state)
    return f"RdmaNodeState node-a: {state['status']['summary']['passTotal']} checks pass, fits the CRD"


def build_checks(version: str) -> list[tuple[str, Callable[[], str | None]]]:
    """The image's build: what checks() needs, so those run only when both of these pass."""
    return [
        ("image: static binaries via scripts/delivery/build-dist (crt-static, VERSION)", lambda: build_static(version)),
        ("image: podman build (FROM scratch, offline)", lambda: build_image(version)),
    ]


def checks(version: str) -> list[tuple[str, Callable[[], str | None]]]:
    out: list[tuple[str, Callable[[], str | None]]] = [
        (f"image: {b} --version shows the VERSION build arg", lambda b=b: test_binary_version(version, b))
        for b in BINARIES]
    out += [
        ("image: the chart's command lines are accepted by the binaries", lambda: test_chart_command_lines(version)),
        ("image: device plugin accepts the chart's pool config (simulated nodes)",
         lambda: test_dp_accepts_chart_config(version)),
        ("image: device plugin accepts rawConfig (sriov-network-device-plugin format)",
         lambda: test_dp_accepts_raw_sriovdp_config(version)),
        ("image: device plugin accepts rawConfig (k8s-rdma-shared-dev-plugin format)",
         lambda: test_dp_accepts_raw_rdma_shared_config(version)),
        ("image: device plugin accepts the README's pools.yaml", lambda: test_readme_pools_in_image(version)),
        ("image: kube-rdma-cni install (init container, root without capabilities)",
         lambda: test_cni_install_in_image(version)),
        ("image: kube-rdma-cni parses every NetworkAttachmentDefinition config",
         lambda: test_cni_accepts_nad_configs(version)),
        ("image: agent checks the example RoceProfile (non-root, simulated node)",
         lambda: test_agent_once_in_image(version)),
    ]
    return out


def main() -> int:
    # `or`: the checks in the image run only when the build passed.
    return chart.run_checks(build_checks(IMAGE_VERSION)) or chart.run_checks(checks(IMAGE_VERSION))


if __name__ == "__main__":
    sys.exit(main())
