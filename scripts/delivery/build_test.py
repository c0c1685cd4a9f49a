"""The build scripts around cargo (scripts/test-delivery runs these; also runnable alone:
`python3 scripts/delivery/build_test.py`).

- scripts/claim-target-dirs: two clones sharing target dirs (as .ci/run's /var/cache/kube-rdma
  lets CI's clone and a developer's) each get binaries built from their own sources.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402

OLD = 1_600_000_000  # 2020-09: older than any build


def _clone(at: Path, says: str) -> None:
    """A one-crate workspace that prints `says`, tracked by git, every file dated OLD."""
    (at / "src").mkdir(parents=True)
    (at / "scripts").mkdir()
    (at / "Cargo.toml").write_text('[package]\nname = "probe"\nversion = "0.1.0"\nedition = "2021"\n')
    (at / "src" / "main.rs").write_text(f'fn main() {{ print!("{says}"); }}\n')
    shutil.copy(chart.ROOT / "scripts" / "claim-target-dirs", at / "scripts" / "claim-target-dirs")
    subprocess.run(["git", "init", "-q", str(at)], check=True)
    subprocess.run(["git", "-C", str(at), "add", "-A"], check=True)
    for p in at.rglob("*"):
        if ".git" not in p.parts:
            os.utime(p, (OLD, OLD))


def _build_and_run(clone: Path, env: dict[str, str]) -> str:
    subprocess.run(["cargo", "build", "-q", "--offline"], cwd=clone, env=env, check=True, capture_output=True)
    return subprocess.run([str(Path(env["CARGO_TARGET_DIR"]) / "debug" / "probe")], capture_output=True,
                          text=True, check=True).stdout


def test_claim_target_dirs() -> str:
    with tempfile.TemporaryDirectory(prefix="kube-rdma-claim-") as tmp:
        t = Path(tmp)
        env = dict(os.environ, CARGO_TARGET_DIR=str(t / "target"), KUBE_RDMA_STATIC_TARGET_DIR=str(t / "static"))
        _clone(t / "a", "a")
        _clone(t / "b", "b")
        claim = lambda c: subprocess.run([str(c / "scripts" / "claim-target-dirs")], env=env, check=True,  # noqa: E731
                                         capture_output=True, text=True).stderr
        assert claim(t / "a") == "", "a first claim of new target dirs touched files"
        assert _build_and_run(t / "a", env) == "a"
        # What the script is for: cargo alone hands clone b the binary built from a's sources.
        assert _build_and_run(t / "b", env) == "a", "cargo rebuilt for another clone by itself: the premise changed"
        said = claim(t / "b")
        assert f"last built from {t / 'a'}" in said, said
        assert _build_and_run(t / "b", env) == "b", "after claim-target-dirs, clone b still ran a's binary"
        assert claim(t / "b") == "", "a second claim by the same clone touched files again"
        assert claim(t / "a") != "" and _build_and_run(t / "a", env) == "a", "back on clone a"
    return "cargo alone ran clone a's binary for clone b; after claim-target-dirs each ran its own"


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("build: claim-target-dirs gives two clones sharing target dirs their own binaries", test_claim_target_dirs),
]

if __name__ == "__main__":
    sys.exit(chart.run_checks(CHECKS))
