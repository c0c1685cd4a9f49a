"""scripts/test-delivery: the chart, the manifests and the image, checked with real tools.

Runs every check of these modules (each a CHECKS list, or checks() when the list needs values),
in this order; each module says what it checks and runs alone too:

- render_test.py: Helm's own engine (PyPI helm-python-sdk, Helm v4) lints and renders the chart
  with the default values and each ci/*.yaml, values.schema.json accepts good values and refuses
  bad pools (typos_test.py: a typo in any values object), chart knobs reach the objects, and
  the CRD upgrade hook.
- nfd_test.py: the chart's NodeFeatureRule (rendered where NFD's API is served; it labels mlx5 and
  E810-with-irdma nodes with the label the node DaemonSets select).
- migration_test.py: the migration values files against the real device plugin's discovery.
- policy_test.py: the admission policies' CEL on admission cases (node label, node state and
  Events of the agent; the DRA driver's slices and claim status).
- monitoring_test.py: alerts (promtool), dashboard queries, the metrics they name scraped from
  the running binaries, and the binaries' logs.
- validate_test.py: the CRD hook's apply against a real kube-apiserver; kubernetes-validate
  --strict (PyPI) of every rendered built-in object and the CRDs (dra.py's DRA mode checks and
  pool_schema_test.py's pool schema checks run here); custom resources against the CRDs' own
  openAPIV3Schema; NADs, ServiceMonitor, manifests/examples and the README quick start's values.
- docs_test.py: the docs test's self test, and every `sh test` block of README.md, CONTRIBUTING.md, lab/README.md and docs/.
- security_test.py: security.py's rules on privileges, RBAC and resources of every workload.
- privileges.py: docs/security.md's privilege table is the one the rendered chart gives
  (`python3 scripts/delivery/privileges.py --write` regenerates it).
- manifests_test.py: scripts/render-manifests --check fails when manifests/ is stale.
- build_test.py: scripts/claim-target-dirs gives two clones sharing target dirs their own binaries.
- circles_test.py: scripts/check-module-circles finds circles (and only those) on workspaces made for it.
- vf_unit_test.py: the VF creation example (examples/vfs/kube-rdma-vfs@.service): systemd-analyze
  verify, its order before the kubelet, its commands on a fake sysfs.
- dockerfile_test.py: the Dockerfile's builder stage's `cargo build` on exactly the tree its COPY
  lines stage (the from-source image cannot be built here: its base image cannot be pulled).
- image_test.py, last: the image is built with podman from statically linked binaries; in it,
  each binary answers --version, every command line the chart renders parses, the device plugin
  accepts the chart's pool config (and sriov-network-device-plugin / k8s-rdma-shared-dev-plugin
  files) on simulated nodes, the CNI installs itself as the init container does and parses every
  NAD config, and the agent checks the example RoceProfile and emits an RdmaNodeState that fits
  the CRD.

Prints one line per check and ends with `N passed, N failed`; exits 1 when anything failed.
`--list` prints the name of every check, in order, without running any; `-k TEXT` runs only the
checks whose name contains TEXT (the image's build too when one of its checks is among them).
Environment: KUBE_RDMA_SKIP_IMAGE=1 skips the image part (reported as failed, not passed);
KUBE_RDMA_STATIC_TARGET_DIR overrides where the static binaries are built.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import build_test  # noqa: E402
import chart  # noqa: E402
import circles_test  # noqa: E402
import dockerfile_test  # noqa: E402
import docs_test  # noqa: E402
import image_test  # noqa: E402
import manifests_test  # noqa: E402
import migration_test  # noqa: E402
import monitoring_test  # noqa: E402
import nfd_test  # noqa: E402
import policy_test  # noqa: E402
import privileges  # noqa: E402
import render_test  # noqa: E402
import security_test  # noqa: E402
import validate_test  # noqa: E402
import vf_unit_test  # noqa: E402


def checks() -> list[tuple[str, Callable[[], str | None]]]:
    """Every check but the image's, in the order they run."""
    return [*render_test.checks(), *nfd_test.CHECKS, *migration_test.CHECKS, *policy_test.CHECKS,
            *monitoring_test.CHECKS, *validate_test.checks(), *docs_test.CHECKS, *security_test.CHECKS,
            *privileges.CHECKS, *manifests_test.CHECKS, *build_test.CHECKS, *circles_test.CHECKS,
            *vf_unit_test.CHECKS, *dockerfile_test.CHECKS]


def main(args: list[str]) -> int:
    version = image_test.IMAGE_VERSION
    if args == ["--list"]:
        for name, _ in checks() + image_test.build_checks(version) + image_test.checks(version):
            print(name)
        return 0
    if len(args) == 2 and args[0] == "-k":
        return selected(args[1], version)
    if args:
        print(f"usage: {sys.argv[0]} [--list | -k TEXT]; got {' '.join(args)}", file=sys.stderr)
        return 2
    sys.stdout.reconfigure(line_buffering=True)  # CI logs show progress during the long build
    suite = chart.Suite()
    for name, fn in checks():
        suite.check(name, fn)
    if os.environ.get("KUBE_RDMA_SKIP_IMAGE") == "1":
        suite.failed += 1
        print("FAIL image: skipped because KUBE_RDMA_SKIP_IMAGE=1")
    elif not shutil.which("podman"):
        suite.failed += 1
        print("FAIL image: podman is not installed (apt-get install podman runc)")
    # all() stops at the first failure: nothing runs in an image that was not built.
    elif all(suite.check(name, fn) for name, fn in image_test.build_checks(version)):
        for name, fn in image_test.checks(version):
            suite.check(name, fn)
    return suite.summary()


def selected(text: str, version: str) -> int:
    """`-k TEXT`: the checks whose name contains TEXT; none is an error, not a pass."""
    sys.stdout.reconfigure(line_buffering=True)
    picked = [c for c in checks() if text in c[0]]
    in_image = [c for c in image_test.checks(version) if text in c[0]]
    builds = image_test.build_checks(version)
    if not picked and not in_image and not any(text in name for name, _ in builds):
        print(f"no check's name contains {text!r} (--list names them)", file=sys.stderr)
        return 2
    suite = chart.Suite()
    for name, fn in picked:
        suite.check(name, fn)
    if (in_image or any(text in name for name, _ in builds)) and all(suite.check(n, f) for n, f in builds):
        for name, fn in in_image:
            suite.check(name, fn)
    return suite.summary()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
