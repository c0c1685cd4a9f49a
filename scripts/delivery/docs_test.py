"""The docs test: the shell commands in the Markdown docs run, and the output they quote is real.

Every fenced code block whose language is a shell (sh, bash, shell, console) carries a marker in its
info string, so a new block cannot escape the test by accident:

- ```sh test              run from the repo root with `bash -euo pipefail`; must exit 0
- ```sh test exit=1       ... must exit 1 (e.g. a check that fails on a simulated node)
- ```sh no-test: REASON   not run; REASON says what it needs (hardware, a cluster, root, ...)

A ```text output block right after a `test` block quotes that block's output: each of its lines
(blank lines and a lone `...` skipped; `...` inside a line stands for anything) must appear in the
output, in order, with runs of spaces counting as one.

A ```yaml file=PATH block shows the file PATH of the repo: its text must be that file's.

Usage: python3 scripts/delivery/docs_test.py [FILE.md ...]   (default: README.md CONTRIBUTING.md lab/README.md docs/*.md)
Prints one line per block run, ends with `N passed, N failed`, exits 1 on any failure. Cargo
commands in the blocks build into $CARGO_TARGET_DIR, as the rest of the suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
SHELLS = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+)(?P<info>.*)$")
TIMEOUT = int(os.environ.get("DOCS_TEST_TIMEOUT", "900"))


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    info: str  # the info string after the language
    text: str


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m["indent"]), m["fence"], m["info"].strip()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            # Blocks inside list items are indented; the fence's indent is not part of the text.
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        if i >= len(lines):
            raise SystemExit(f"{rel(path)}:{start}: code block never closed")
        i += 1
        lang, _, rest = info.partition(" ")
        out.append(Block(path, start, lang, rest.strip(), "\n".join(body) + "\n"))
    return out


def squeeze(s: str) -> str:
    return " ".join(s.split())


def missing_lines(expected: str, output: str) -> list[str]:
    """The lines of `expected` not found in `output` in order (`...` matches anything)."""
    got = [squeeze(line) for line in output.splitlines()]
    missing, pos = [], 0
    for want in expected.splitlines():
        w = squeeze(want)
        if not w or w == "...":
            continue
        pattern = re.compile(".*".join(re.escape(squeeze(p)) for p in w.split("...")))
        for j in range(pos, len(got)):
            if pattern.search(got[j]):
                pos = j + 1
                break
        else:
            missing.append(want)
    return missing


def rel(p: Path) -> Path:
    return p.relative_to(ROOT) if p.is_relative_to(ROOT) else p


def where(b: Block) -> str:
    return f"{rel(b.path)}:{b.line}"


def check_file(path: Path, results: list[tuple[bool, str]]) -> None:
    bs = blocks(path)
    for k, b in enumerate(bs):
        if b.lang == "yaml" and b.info.startswith("file="):
            target = ROOT / b.info.removeprefix("file=").split()[0]
            ok = target.is_file() and target.read_text(encoding="utf-8") == b.text
            results.append((ok, f"{where(b)}: yaml block is {rel(target)}"
                            + ("" if ok else " - differs from the file (or the file is missing)")))
            continue
        if b.lang not in SHELLS:
            continue
        if b.info.startswith("no-test"):
            reason = b.info.removeprefix("no-test").lstrip(":").strip()
            if not reason:
                results.append((False, f"{where(b)}: `no-test` without a reason (write `no-test: WHY`)"))
            elif isinstance(results, Printed):
                print(f"  skip {where(b)}: {reason}")
            continue
        if not b.info.startswith("test"):
            results.append((False, f"{where(b)}: shell block without a marker: add `test` (run by "
                            "scripts/delivery/docs_test.py) or `no-test: WHY`"))
            continue
        m = re.search(r"\bexit=(\d+)", b.info)
        want_rc = int(m[1]) if m else 0
        start = time.monotonic()
        try:
            p = subprocess.run(["bash", "-euo", "pipefail", "-c", b.text], cwd=ROOT, capture_output=True,
                               text=True, timeout=TIMEOUT)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = None, str(e.stdout or ""), f"timed out after {TIMEOUT}s"
        took = f"{time.monotonic() - start:.1f}s"
        problems = []
        if rc != want_rc:
            problems.append(f"exit status {rc}, expected {want_rc}")
        nxt = bs[k + 1] if k + 1 < len(bs) else None
        if nxt and nxt.lang == "text" and nxt.info.split()[:1] == ["output"]:
            lost = missing_lines(nxt.text, out + err)
            if lost:
                problems.append(f"output quoted at {where(nxt)} not printed:\n" + "\n".join(lost))
        title = f"{where(b)}: {b.text.strip().splitlines()[0][:80]} ({took})"
        if problems:
            tail = (out + err)[-4000:]
            results.append((False, title + "\n" + "\n".join(problems) + "\n--- output (last 4000 chars):\n"
                            + tail))
        else:
            results.append((True, title))


def doc_files(args: list[str]) -> list[Path]:
    if args:
        return [Path(a).resolve() for a in args]
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "lab" / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


class Printed(list):
    """Results, each printed as it comes (a docs run builds with cargo: show progress)."""

    def append(self, item: tuple[bool, str]) -> None:
        ok, msg = item
        print(("  ok   " if ok else "  FAIL ") + msg.replace("\n", "\n       "), flush=True)
        super().append(item)


def run(files: list[Path], quiet: bool = False) -> list[str]:
    """Checks `files`; returns the failure messages."""
    results: list[tuple[bool, str]] = [] if quiet else Printed()
    for f in files:
        check_file(f, results)
    if not quiet:
        print(f"{sum(ok for ok, _ in results)} passed, {sum(not ok for ok, _ in results)} failed")
    return [msg for ok, msg in results if not ok]


def self_test() -> str:
    """The docs test fails, naming file and line, on each kind of drift it exists to catch."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        md = Path(d) / "bad.md"
        md.write_text("\n".join([
            "```sh", "true", "```",                                       # 1: no marker
            "```sh no-test", "true", "```",                               # 4: no reason
            "```sh test", "exit 3", "```",                                # 7: fails
            "```sh test exit=1", "true", "```",                           # 10: wrong exit status
            "```sh test", "echo 'PF is ens3np0, VF index 0'", "```",      # 13: quoted output differs
            "```text output", "PF is ens1f0np0 ... VF index 0", "```",
            "```yaml file=examples/pools.yaml", "pools: []", "```",      # 19: not the file
            "```sh test", "echo a  b ; echo c", "```",                    # 22: passes
            "```text output", "a b", "...", "c", "```",
            "```sh no-test: needs an RDMA NIC", "reboot", "```",          # 29: skipped, passes
            "",
        ]))
        fails = run([md], quiet=True)
        lines = sorted(int(re.match(r".*bad\.md:(\d+)", f)[1]) for f in fails)
        assert lines == [1, 4, 7, 10, 13, 19], f"failures at lines {lines}: {fails}"
        assert "exit status 3, expected 0" in fails[2] and "not printed" in fails[4], fails
    return "unmarked, reasonless, failing, wrong exit, wrong output and stale file blocks are caught"


def test_docs_blocks() -> str:
    files = doc_files([])
    failures = run(files, quiet=True)
    assert not failures, "\n".join(failures)
    return f"{len(files)} files"


# What scripts/test-delivery runs of this file.
CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("docs: the docs test catches unmarked, failing and stale blocks", self_test),
    ("docs: every `sh test` block of README.md, CONTRIBUTING.md, lab/README.md and docs/ runs, with the output it quotes", test_docs_blocks),
]


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    if sys.argv[1:] == ["--self-test"]:
        print(self_test())
        return 0
    return 1 if run(doc_files(sys.argv[1:])) else 0


if __name__ == "__main__":
    sys.exit(main())
