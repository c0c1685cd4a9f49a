"""The Dockerfile's from-source path (scripts/test-delivery runs these; also runnable alone:
`python3 scripts/delivery/dockerfile_test.py`).

`podman build --target from-source` needs to pull the Rust base image, which CI cannot (no
container registry is reachable; the image checks build `--pull=never`). What breaks that build
is ours, though: a COPY list that misses a file cargo needs, or a build command that no longer
fits the workspace. So the builder stage's own `cargo build` runs here, with its own ENV, on a
tree staged from the Dockerfile's own COPY lines (parsed here, filtered by .dockerignore as
podman filters the build context), and the binaries its `cp` names must come out.

KUBE_RDMA_BUILDER_DIR (default /var/cache/kube-rdma/dockerfile-builder, outside the clone as
.ci/run keeps every build output) holds the staged tree (`src/`) and its CARGO_TARGET_DIR
(`target/`): a later run rebuilds only what changed.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import image_test  # noqa: E402

DOCKERFILE = chart.ROOT / "Dockerfile"
# podman reads .containerignore when there is one, else .dockerignore.
IGNORE_FILES = [chart.ROOT / ".containerignore", chart.ROOT / ".dockerignore"]


@dataclass
class Stage:
    """One FROM ... AS name stage: its COPY lines (sources, dest), ENV, ARGs and RUN commands."""
    name: str
    workdir: str = "/"
    args: dict[str, str] = field(default_factory=dict)
    copies: list[tuple[list[str], str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per instruction: comments dropped, `\\` continuations joined."""
    out, cur = [], ""
    for line in text.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        word, _, rest = cur.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    return out


def expand(value: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), ""), value)


def key_values(rest: str, variables: dict[str, str]) -> dict[str, str]:
    """`K=v K2="v 2"` as ARG and ENV write them (an ARG may have no value)."""
    out = {}
    for word in shlex.split(rest):
        k, _, v = word.partition("=")
        out[k] = expand(v, variables)
    return out


def stages(text: str) -> dict[str, Stage]:
    """Every stage by name; ARGs before the first FROM are the defaults the stages' ARGs take."""
    global_args: dict[str, str] = {}
    out: dict[str, Stage] = {}
    stage: Stage | None = None
    for word, rest in instructions(text):
        if word == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, f"FROM {rest}"
            stage = out.setdefault(m.group(2) or f"stage{len(out)}", Stage(m.group(2) or ""))
        elif word == "ARG" and stage is None:
            global_args.update(key_values(rest, global_args))
        elif stage is None:
            raise AssertionError(f"{word} before the first FROM")
        elif word == "ARG":
            for k, v in key_values(rest, {**global_args, **stage.args}).items():
                stage.args[k] = v or global_args.get(k, "")
        elif word == "ENV":
            stage.env.update(key_values(rest, {**stage.args, **stage.env}))
        elif word == "WORKDIR":
            stage.workdir = rest
        elif word == "COPY" and not rest.startswith("--from"):
            *sources, dest = shlex.split(rest)
            stage.copies.append((sources, dest))
        elif word == "RUN":
            stage.runs.append(rest)
    return out


def ignore_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore lines as (is an exception `!`, regex of the path), in order: Go's
    filepath.Match syntax on the whole relative path, `**` any number of directories."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pat = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rx = ""
        for part in re.split(r"(\*\*/|\*\*|\*|\?)", pat):
            rx += {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        out.append((negate, re.compile(rx)))
    return out


def ignored(rel: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """As podman's build context: a path is left out when it, or a directory above it, matches
    the last pattern that matches (an exception `!` lets it in again)."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    verdict = False
    for negate, rx in patterns:
        if any(rx.fullmatch(p) for p in prefixes):
            verdict = not negate
    return verdict


def copied_files(stage: Stage, context: Path) -> dict[str, Path]:
    """Path in the stage's WORKDIR -> file in the context, for each of the stage's COPY lines:
    a directory's contents go under the destination, a file into it (dest ending in `/`)."""
    ignore = next((f for f in IGNORE_FILES if f.exists()), None)
    patterns = ignore_patterns(ignore.read_text(encoding="utf-8")) if ignore else []
    out: dict[str, Path] = {}
    for sources, dest in stage.copies:
        dest = os.path.normpath(dest)
        assert not dest.startswith("/"), f"COPY to an absolute path {dest}: staged relative to WORKDIR only"
        for src in sources:
            path = context / src
            assert path.exists(), f"COPY {src}: not in the build context"
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if not p.is_dir())
            for f in files:
                rel = f.relative_to(context).as_posix()
                if ignored(rel, patterns):
                    continue
                inner = f.name if path.is_file() else f.relative_to(path).as_posix()
                out[os.path.normpath(os.path.join(dest, inner))] = f
    return out


def sync_tree(files: dict[str, Path], into: Path) -> int:
    """Make `into` hold exactly `files`; a file whose bytes are unchanged keeps its mtime (cargo
    then rebuilds only what changed), a changed one is rewritten now. Returns files written."""
    into.mkdir(parents=True, exist_ok=True)
    written = 0
    for rel, src in files.items():
        dst = into / rel
        if src.is_symlink():
            if dst.is_symlink() and os.readlink(dst) == os.readlink(src):
                continue
            dst.unlink(missing_ok=True)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), dst)
        else:
            data = src.read_bytes()
            if dst.is_file() and not dst.is_symlink() and dst.read_bytes() == data:
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.unlink(missing_ok=True)
            dst.write_bytes(data)
            shutil.copymode(src, dst)
        written += 1
    for p in sorted(into.rglob("*"), reverse=True):
        rel = p.relative_to(into).as_posix()
        if p.is_symlink() or p.is_file():
            if rel not in files:
                p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    return written


def builder() -> Stage:
    return stages(DOCKERFILE.read_text(encoding="utf-8"))["builder"]


def build_steps(stage: Stage) -> tuple[list[str], list[str], str]:
    """The builder's RUN split at `&&`: the steps up to and including `cargo build`, the binaries
    its `cp ... /dist/` takes and the directory it takes them from (a `cd` relative to WORKDIR)."""
    run = next(r for r in stage.runs if "cargo build" in r)
    steps = [s.strip() for s in run.split("&&")]
    n = next(i for i, s in enumerate(steps) if s.startswith("cargo build"))
    cd = next(shlex.split(s)[1] for s in steps[n:] if s.startswith("cd "))
    cp = next(shlex.split(s) for s in steps[n:] if s.startswith("cp "))
    return steps[:n + 1], cp[1:-1], cd


def builder_dir() -> Path:
    return Path(os.environ.get("KUBE_RDMA_BUILDER_DIR") or "/var/cache/kube-rdma/dockerfile-builder")


def builder_env(stage: Stage, target_dir: Path) -> dict[str, str]:
    """The environment of the builder's RUN: ours without what cargo or a caller's cargo sets
    (CARGO_PKG_*, RUSTFLAGS, ...; as scripts/delivery/build-dist drops them), plus the stage's ENV."""
    drop = re.compile(r"CARGO_(PKG_|MANIFEST_|BIN_|CRATE_NAME|PRIMARY_PACKAGE|TARGET_TMPDIR|TARGET_DIR|BUILD_)"
                      r"|OUT_DIR$|RUSTFLAGS$|CARGO_ENCODED_RUSTFLAGS$|RUSTC_WRAPPER$")
    env = {k: v for k, v in os.environ.items() if not drop.match(k)}
    return {**env, **stage.env, "CARGO_TARGET_DIR": str(target_dir)}


def test_builder_copies_every_member() -> str:
    """Fast, and names what is missing: cargo loads every workspace member's manifest (and
    --locked checks the whole Cargo.lock), so each member must be among the COPY'd paths."""
    import tomllib

    members = tomllib.loads((chart.ROOT / "Cargo.toml").read_text(encoding="utf-8"))["workspace"]["members"]
    staged = copied_files(builder(), chart.ROOT)
    missing = [m for m in members if f"{m}/Cargo.toml" not in staged]
    assert "Cargo.toml" in staged and "Cargo.lock" in staged, "the builder copies no Cargo.toml/Cargo.lock"
    assert not missing, f"the Dockerfile's builder stage copies no {missing}: cargo cannot load the workspace"
    left_out = [r for r in staged if r.startswith(("lab/.cache/", "target/")) or r.endswith(".swp")]
    assert not left_out, f".dockerignore'd paths staged: {left_out[:5]}"
    return f"{len(members)} members, {len(staged)} files"


def test_both_stages_ship_the_same_binaries() -> str:
    """from-source and the default stage put the same binaries in /usr/bin (the chart runs
    /usr/bin/<binary>); the builder's `cp` and image_test.BINARIES name the same four."""
    all_stages = stages(DOCKERFILE.read_text(encoding="utf-8"))
    _, built, _ = build_steps(all_stages["builder"])
    dist = [Path(s).name for sources, _ in all_stages["image"].copies for s in sources if s.startswith("dist/")]
    assert sorted(built) == sorted(dist) == sorted(image_test.BINARIES), (built, dist, image_test.BINARIES)
    return ", ".join(built)


def test_builder_cargo_build_on_copied_tree() -> str:
    """The builder's RUN, up to its `cargo build`, verbatim in the staged tree (WORKDIR), with
    the stage's ENV; then every binary its `cp` takes is there."""
    stage = builder()
    steps, binaries, cd = build_steps(stage)
    base = builder_dir()
    base.mkdir(parents=True, exist_ok=True)
    src, target = base / "src", base / "target"
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two clones sharing the directory take turns
        written = sync_tree(copied_files(stage, chart.ROOT), src)
        script = " && ".join(steps) + f' && printf %s "{cd}"'
        res = subprocess.run(["bash", "-ec", script], cwd=src, env=builder_env(stage, target),
                             capture_output=True, text=True)
        assert res.returncode == 0, f"{script}\n{res.stderr[-4000:]}"
    rel = res.stdout.strip().splitlines()[-1]
    assert rel.startswith("target/"), f"the builder takes its binaries from {rel}, not its target dir"
    out = target / rel.removeprefix("target/")
    missing = [b for b in binaries if not os.access(out / b, os.X_OK)]
    assert not missing, f"after the builder's cargo build, {missing} are not in {out}"
    return f"{len(binaries)} binaries in {out} ({written} staged files changed)"


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("Dockerfile: the builder stage copies every workspace member", test_builder_copies_every_member),
    ("Dockerfile: from-source and the default stage ship the same binaries", test_both_stages_ship_the_same_binaries),
    ("Dockerfile: the builder's cargo build succeeds on exactly the COPY'd tree",
     test_builder_cargo_build_on_copied_tree),
]


if __name__ == "__main__":
    sys.exit(chart.run_checks(CHECKS))
