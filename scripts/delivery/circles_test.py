"""scripts/check-module-circles on workspaces made for the purpose (scripts/test-delivery runs these;
also runnable alone: `python3 scripts/delivery/circles_test.py`).

- Two sibling files that use each other are one circle, reported with both arrows and the file:line
  of a use each, and the script fails; so are two rooms of a crate root whose files use each
  other (`netlink/dcb.rs` and `roce.rs`), and a circle closed through a `pub use` re-export.
- A module using its parent's items is an up-arrow: listed with `--list`, never a failure; uses in
  `#[cfg(test)]` code, comments and strings are no arrows at all.
- Use trees (`crate::a::{self, b::{c as d}}`) are read as the paths they name.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402

SCRIPT = chart.ROOT / "scripts" / "check-module-circles"

# A crate whose rooms hold no circle: its children use their parent (lib.rs's version list, dra's
# shared error), and the crate's uses that would close circles are test code, comments or strings.
CLEAN = {
    "Cargo.toml": '[workspace]\nmembers = ["clean"]\n',
    "clean/src/lib.rs": """
        //! Uses `crate::b` in a comment: no arrow.
        pub mod a;
        pub mod b;
        pub mod dra;
        pub const VERSIONS: &[&str] = &["1.0.0"];
    """,
    "clean/src/a.rs": """
        use crate::b::Thing;
        pub fn versions() -> usize { crate::VERSIONS.len() }
        pub fn thing() -> Thing { Thing }
    """,
    "clean/src/b.rs": """
        pub struct Thing;
        pub const SAYS: &str = "crate::a::versions() is in a string, not a use";
        #[cfg(test)]
        mod tests {
            use crate::a::versions;
            #[test]
            fn one() { assert_eq!(versions(), 1); }
        }
    """,
    "clean/src/dra/mod.rs": """
        pub mod cdi;
        pub mod prepare;
        #[derive(Debug)]
        pub struct Error;
    """,
    "clean/src/dra/cdi.rs": "use super::Error;\npub fn write() -> Result<(), Error> { Ok(()) }\n",
    "clean/src/dra/prepare.rs": "pub fn prepare() -> Result<(), super::Error> { super::cdi::write() }\n",
}

# The same shapes with circles: siblings in a folder, two rooms of the crate root, and one closed
# through lib.rs's `pub use`.
CIRCLED = {
    "Cargo.toml": '[workspace]\nmembers = ["circled"]\n',
    "circled/src/lib.rs": """
        pub mod dra;
        pub mod netlink;
        pub mod roce;
        pub mod a;
        pub mod b;
        pub use b::Thing;
    """,
    "circled/src/dra.rs": "pub mod cdi;\npub mod prepare;\n",
    "circled/src/dra/cdi.rs": "use super::prepare::request;\npub fn spec() -> u8 { request() }\n",
    "circled/src/dra/prepare.rs": """
        pub fn request() -> u8 { 1 }

        pub fn prepare() -> u8 {
            super::cdi::spec()
        }
    """,
    "circled/src/netlink/mod.rs": "pub mod dcb;\n",
    "circled/src/netlink/dcb.rs": "use crate::roce::{self, DcbxMode};\npub const HOST: u8 = 1;\n",
    "circled/src/roce.rs": "pub enum DcbxMode { Host }\npub fn host() -> u8 { crate::netlink::dcb::HOST }\n",
    "circled/src/a.rs": "pub fn make() -> crate::Thing { crate::Thing }\n",
    "circled/src/b.rs": "pub struct Thing;\npub fn twice() { crate::a::make(); }\n",
}


def _workspace(at: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = at / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        lines = text.strip("\n").split("\n")
        indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
        p.write_text("\n".join(x[indent:] for x in lines) + "\n")
    return at


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args, str(root)], capture_output=True, text=True)


def test_sibling_circles_fail_with_their_arrows() -> str:
    with tempfile.TemporaryDirectory(prefix="kube-rdma-circles-") as tmp:
        out = _run(_workspace(Path(tmp), CIRCLED))
    assert out.returncode == 1, f"exit {out.returncode}\n{out.stdout}{out.stderr}"
    want = [
        "circle in circled/src/dra/ (circled lib): cdi <-> prepare",
        "    cdi -> prepare    circled/src/dra/cdi.rs:1  super::prepare::request",
        "    prepare -> cdi    circled/src/dra/prepare.rs:4  super::cdi::spec",
        "circle in circled/src/ (circled lib): a <-> b",
        "    a -> b    circled/src/a.rs:1  crate::Thing",
        "    b -> a    circled/src/b.rs:2  crate::a::make",
        "circle in circled/src/ (circled lib): netlink <-> roce",
        "    netlink -> roce    circled/src/netlink/dcb.rs:1  crate::roce::{self, DcbxMode}",
        "    roce -> netlink    circled/src/roce.rs:2  crate::netlink::dcb::HOST",
    ]
    got = out.stdout.splitlines()
    for line in want:
        assert line in got, f"missing {line!r} in:\n{out.stdout}"
    assert len([g for g in got if g.startswith("circle in")]) == 3, out.stdout
    assert "3 circle(s) inside rooms" in out.stderr, out.stderr
    return "3 circles found: siblings in dra/, two rooms of the crate root, one through a re-export"


def test_up_arrows_are_listed_but_never_fail() -> str:
    with tempfile.TemporaryDirectory(prefix="kube-rdma-circles-") as tmp:
        root = _workspace(Path(tmp), CLEAN)
        plain, listed = _run(root), _run(root, "--list")
    assert plain.returncode == 0, f"exit {plain.returncode}\n{plain.stdout}{plain.stderr}"
    assert plain.stdout == "", plain.stdout
    assert "0 circle(s) inside rooms, 3 up-arrow(s) to a parent (--list shows them)" in plain.stderr, plain.stderr
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "up-arrow: a -> its parent clean/src/lib.rs    clean/src/a.rs:2  crate::VERSIONS",
        "up-arrow: dra::cdi -> its parent clean/src/dra/mod.rs    clean/src/dra/cdi.rs:1  super::Error",
        "up-arrow: dra::prepare -> its parent clean/src/dra/mod.rs    clean/src/dra/prepare.rs:1  super::Error",
    ], listed.stdout
    return "3 up-arrows listed, exit 0; test code, comments and strings drew no arrow"


def _checker():
    loader = importlib.machinery.SourceFileLoader("check_module_circles", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_use_trees_are_read_as_the_paths_they_name() -> str:
    paths = _checker().use_paths
    cases = {
        "crate::a::{self, b::{c as d, e}}": [["crate", "a"], ["crate", "a", "b", "c"], ["crate", "a", "b", "e"]],
        "super::super::x::*": [["super", "super", "x", "*"]],
        "crate::{cluster, node}": [["crate", "cluster"], ["crate", "node"]],
        "self::inner::Item as Other": [["self", "inner", "Item"]],
    }
    for tree, want in cases.items():
        assert paths(tree) == want, f"{tree}: {paths(tree)}"
    return None


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("circles: sibling modules using each other fail check-module-circles, with their arrows",
     test_sibling_circles_fail_with_their_arrows),
    ("circles: up-arrows to a parent are listed but never fail", test_up_arrows_are_listed_but_never_fail),
    ("circles: use trees are read as the paths they name", test_use_trees_are_read_as_the_paths_they_name),
]

if __name__ == "__main__":
    sys.exit(chart.run_checks(CHECKS))
