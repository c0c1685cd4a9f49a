"""manifests/ (the chart rendered for plain `kubectl apply`) is current and valid (scripts/test-delivery
runs these; also runnable alone: `python3 scripts/delivery/manifests_test.py`).

- `scripts/render-manifests --check` passes, and fails with a diff on an edited copy.
- manifests/kube-rdma.yaml starts with its Namespace and passes kubernetes-validate --strict.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import validate_test  # noqa: E402


def test_manifests_fresh() -> None:
    res = subprocess.run([sys.executable, str(chart.ROOT / "scripts" / "render-manifests"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_manifests_check_detects_staleness() -> str:
    """`render-manifests --check` fails on an edited copy and passes on a fresh one."""
    script = [sys.executable, str(chart.ROOT / "scripts" / "render-manifests")]
    with tempfile.TemporaryDirectory(prefix="kube-rdma-manifests-") as tmp:
        env = dict(os.environ, KUBE_RDMA_MANIFESTS_DIR=tmp)
        res = subprocess.run(script, env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        fresh = subprocess.run(script + ["--check"], env=env, capture_output=True, text=True)
        assert fresh.returncode == 0, fresh.stderr
        main = Path(tmp, "kube-rdma.yaml")
        main.write_text(main.read_text(encoding="utf-8").replace("--rescan-interval=30", "--rescan-interval=5"),
                        encoding="utf-8")
        stale = subprocess.run(script + ["--check"], env=env, capture_output=True, text=True)
        assert stale.returncode == 1 and "rescan-interval" in stale.stderr, stale.stderr
    return "an edited manifest is reported with its diff"


def test_manifests_validate() -> str:
    """manifests/ is rendered for Kubernetes >= 1.30 (chart.MANIFESTS_KUBE_VERSION)."""
    path = chart.ROOT / "manifests" / "kube-rdma.yaml"
    objs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert objs[0]["kind"] == "Namespace", objs[0]["kind"]
    return chart.kubernetes_validate(validate_test.builtin(objs), "manifests/kube-rdma.yaml",
                                     [chart.MANIFESTS_KUBE_VERSION, validate_test.KUBE_VERSIONS[-1]])


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("manifests: up to date (scripts/render-manifests --check)", test_manifests_fresh),
    ("manifests: the staleness check catches an edit", test_manifests_check_detects_staleness),
    ("manifests: kube-rdma.yaml validates", test_manifests_validate),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
