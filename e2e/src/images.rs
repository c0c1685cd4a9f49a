//! Container images, made offline (there is no registry): the pod sandbox
//! image from our `pause` peer, a test image from Debian's busybox-static,
//! and kube-rdma's own image built by podman from the repository's
//! Dockerfile and `scripts/delivery/build-dist`. Each is saved as a
//! docker-archive under the cache directory, named by a hash of what went
//! into it (rebuilt only when that changes), and imported into containerd.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use plumbing::atomic_file;

use crate::daemon::run;
use crate::peers;

/// The sandbox image containerd pins (`pinned_images.sandbox`).
pub const PAUSE: &str = "localhost/kube-rdma-e2e/pause:1";
/// The test workload image: busybox with its applets on PATH.
pub const BUSYBOX: &str = "localhost/kube-rdma-e2e/busybox:1";
/// Repository of kube-rdma's image (the tag is a hash of its binaries).
pub const KUBE_RDMA_REPO: &str = "localhost/kube-rdma";

/// The version compiled into the e2e image's binaries (`--version`): the delivery checks'
/// (`IMAGE_VERSION` in scripts/delivery/image_test.py), so the two static builds are one
/// (another KUBE_RDMA_VERSION recompiles every crate of ours, twice per CI run).
pub const E2E_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "-test.1");

/// An image saved as a docker-archive.
#[derive(Debug, Clone)]
pub struct Image {
    /// Its reference.
    pub name: String,
    pub archive: PathBuf,
}

fn podman() -> Command {
    let mut c = Command::new("podman");
    c.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
    c
}

fn images_dir() -> Result<PathBuf> {
    let d = peers::cache_dir().join("images");
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

fn hash_files(files: &[&Path]) -> Result<String> {
    let mut c = Command::new("sha256sum");
    c.args(files);
    let out = run(&mut c)?;
    let mut c = Command::new("sha256sum");
    let mut child = c.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn()?;
    use std::io::Write;
    child.stdin.take().context("sha256sum stdin")?.write_all(out.as_bytes())?;
    let o = child.wait_with_output()?;
    Ok(String::from_utf8_lossy(&o.stdout).chars().take(12).collect())
}

/// `podman import` of `rootfs` (a directory) as `name`, saved to the cache.
fn import_rootfs(name: &str, rootfs: &Path, changes: &[&str], key: &str) -> Result<Image> {
    let archive = images_dir()?
        .join(format!("{}-{key}.tar", name.rsplit('/').next().unwrap_or(name).replace(':', "-")));
    if archive.exists() {
        return Ok(Image { name: name.into(), archive });
    }
    let tar = rootfs.with_extension("tar");
    run(Command::new("tar")
        .arg("-C")
        .arg(rootfs)
        .args(["--owner=0", "--group=0", "-cf"])
        .arg(&tar)
        .arg("."))?;
    let mut c = podman();
    c.arg("import");
    for ch in changes {
        c.args(["--change", ch]);
    }
    c.arg(&tar).arg(name);
    run(&mut c)?;
    save(name, &archive)?;
    Ok(Image { name: name.into(), archive })
}

/// `podman save` of `name` to `archive`, whole or not at all: the archive's existence is what
/// says the image is built, so a cut-off one (a killed build, a power loss) must never be left
/// there. podman writes the archive to its stdout (the same bytes as `-o FILE`).
fn save(name: &str, archive: &Path) -> Result<()> {
    let mut c = podman();
    c.args(["save", "--format", "docker-archive", name]);
    let out = c.output().with_context(|| format!("running {c:?}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{c:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(atomic_file::write_durable(archive, &out.stdout, None)?)
}

/// The sandbox image: our `pause` binary as `/pause`.
pub fn pause() -> Result<Image> {
    let bin = peers::bin("pause");
    let key = hash_files(&[&bin])?;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("rootfs");
    std::fs::create_dir_all(&root)?;
    std::fs::copy(&bin, root.join("pause")).context("copying pause")?;
    import_rootfs(PAUSE, &root, &["ENTRYPOINT [\"/pause\"]"], &key)
}

/// The test image: Debian's static busybox with a link per applet in /bin.
pub fn busybox() -> Result<Image> {
    let bb = Path::new("/bin/busybox");
    let key = hash_files(&[bb])?;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("rootfs");
    for d in ["bin", "etc", "tmp", "proc", "sys", "dev", "root"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    std::fs::copy(bb, root.join("bin/busybox")).context("copying busybox")?;
    let list = run(Command::new(bb).arg("--list"))?;
    for applet in list.lines().map(str::trim).filter(|a| !a.is_empty() && *a != "busybox") {
        let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )?;
    std::fs::write(root.join("etc/group"), "root:x:0:\nnobody:x:65534:\n")?;
    import_rootfs(BUSYBOX, &root, &["CMD [\"sh\"]", "ENV PATH=/bin"], &key)
}

/// kube-rdma's image: `build-dist --debug` (static binaries), then `podman
/// build` of the repository's Dockerfile on them, as the README says.
pub fn kube_rdma() -> Result<Image> {
    let root = peers::repo_root();
    let dist = peers::cache_dir().join("dist");
    // build-dist's own target dir (KUBE_RDMA_STATIC_TARGET_DIR or target-static), shared with
    // the delivery checks' image build.
    let st = Command::new(root.join("scripts/delivery/build-dist"))
        .args(["--debug", "--out"])
        .arg(&dist)
        .env("VERSION", E2E_VERSION)
        .status()
        .context("running scripts/delivery/build-dist")?;
    anyhow::ensure!(st.success(), "scripts/delivery/build-dist failed ({st})");
    let bins = ["kube-rdma-device-plugin", "kube-rdma-cni", "kube-rdma-operator", "kubectl-rdma"];
    let paths: Vec<PathBuf> = bins.iter().map(|b| dist.join(b)).collect();
    let mut files: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let dockerfile = root.join("Dockerfile");
    files.push(&dockerfile);
    let key = hash_files(&files)?;
    let name = format!("{KUBE_RDMA_REPO}:e2e-{key}");
    let archive = images_dir()?.join(format!("kube-rdma-{key}.tar"));
    if archive.exists() {
        return Ok(Image { name, archive });
    }
    let ctx = tempfile::tempdir()?;
    std::fs::create_dir_all(ctx.path().join("dist"))?;
    for b in bins {
        std::fs::copy(dist.join(b), ctx.path().join("dist").join(b))
            .with_context(|| format!("copying {b}"))?;
    }
    std::fs::copy(&dockerfile, ctx.path().join("Dockerfile"))?;
    run(podman()
        .args(["build", "--pull=never", "--build-arg", &format!("VERSION={E2E_VERSION}"), "-t", &name])
        .arg(ctx.path()))?;
    save(&name, &archive)?;
    prune_kube_rdma(&archive);
    Ok(Image { name, archive })
}

/// Every build of other sources left a 100 MB archive and a podman image: keep only the
/// archive just saved (what clusters import; podman's copy is not needed after `save`), and
/// no temp file a killed `save` left (builds hold `.images.lock`, so none is being written).
/// Best effort: what cannot be removed now is removed by a later build.
fn prune_kube_rdma(keep: &Path) {
    if let Ok(rd) = images_dir().and_then(|d| Ok(std::fs::read_dir(d)?)) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            let temp = n.starts_with(".kube-rdma-") && n.ends_with(".tmp");
            if (temp || n.starts_with("kube-rdma-") && n.ends_with(".tar")) && e.path() != keep {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let reference = format!("reference={KUBE_RDMA_REPO}:e2e-*");
    if let Ok(tags) =
        run(podman().args(["images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", &reference]))
    {
        for tag in tags.lines().filter(|t| !t.is_empty()) {
            let _ = run(podman().args(["rmi", tag]));
        }
    }
}

/// Imports `img` into containerd's `k8s.io` namespace (the CRI's).
pub fn import(containerd_sock: &Path, img: &Image) -> Result<()> {
    run(Command::new(peers::bin("ctr"))
        .arg(format!("--address={}", containerd_sock.display()))
        .args(["-n", "k8s.io", "images", "import"])
        .arg(&img.archive))?;
    Ok(())
}
