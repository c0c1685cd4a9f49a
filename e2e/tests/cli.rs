//! `kube-rdma-cluster`'s command line, without a cluster: the output and exit
//! status convention of every kube-rdma binary (`plumbing::cli`), and `up`
//! refusing what it cannot do before it touches anything.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_kube-rdma-cluster");

/// The binary with its cache and state in `dir` and an instance no real cluster uses,
/// and no Go on PATH: whatever went wrong, it could not build or start a cluster.
fn cluster(dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    isolate(&mut c, dir);
    c
}

fn isolate(c: &mut Command, dir: &Path) {
    c.env("KUBE_RDMA_E2E_CACHE", dir.join("cache"))
        .env("KUBE_RDMA_E2E_DIR", dir.join("state"))
        .env("KUBE_RDMA_E2E_INSTANCE", "9")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn left_nothing(dir: &Path) {
    for d in ["cache", "state", "state-9"] {
        assert!(!dir.join(d).exists(), "{d} was created in {}", dir.display());
    }
}

#[test]
fn help_and_version_go_to_stdout_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["--help"][..], &["up", "--help"], &["--version"]] {
        let out = cluster(dir.path()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{args:?} wrote to stderr: {}", text(&out.stderr));
        assert!(!out.stdout.is_empty(), "{args:?} printed nothing");
    }
    let up = text(&cluster(dir.path()).args(["up", "--help"]).output().unwrap().stdout);
    assert!(up.contains("--values <FILE>") && up.contains("--no-chart"), "{up}");
    left_nothing(dir.path());
}

#[test]
fn usage_errors_exit_2_with_clap_message() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["frobnicate"][..], &["up", "--values", "x.yaml", "--no-chart"], &["up", "--bogus"]] {
        let out = cluster(dir.path()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "{args:?} printed on stdout: {}", text(&out.stdout));
        assert!(text(&out.stderr).contains("error:"), "{args:?}: {}", text(&out.stderr));
    }
    left_nothing(dir.path());
}

/// The binary copied where any user may run it (the target dir may be under /root).
fn runnable_copy(dir: &Path) -> PathBuf {
    let bin = dir.join("kube-rdma-cluster");
    std::fs::copy(BIN, &bin).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn as_nobody(dir: &Path, args: &[&str]) -> Output {
    let bin = runnable_copy(dir);
    // A child another test forks while the copy is open for writing holds that fd until its
    // exec: running the copy meanwhile fails with ETXTBSY, so try again a few times.
    for _ in 0..50 {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(&bin).args(args);
        isolate(&mut c, dir);
        let out = c.output().expect("setpriv (util-linux)");
        if !text(&out.stderr).contains("Text file busy") {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{} stayed busy", bin.display());
}

#[test]
fn up_down_and_build_without_root_say_so_before_touching_anything() {
    for cmd in ["up", "down", "build"] {
        let dir = tempfile::tempdir().unwrap();
        let out = as_nobody(dir.path(), &[cmd]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert_eq!(err.lines().count(), 1, "{cmd}: one error line, got {err}");
        assert!(
            err.starts_with("kube-rdma-cluster: the e2e cluster needs root: it makes network namespaces"),
            "{cmd}: {err}"
        );
        left_nothing(dir.path());
    }
}

#[test]
fn up_refuses_values_that_are_not_a_mapping_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("values.yaml");
    for (body, says) in [("- a\n- b\n", "must be a YAML mapping"), ("a: [\n", "is not YAML")] {
        std::fs::write(&f, body).unwrap();
        let out = cluster(dir.path()).arg("up").arg("--values").arg(&f).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body:?}: {err}");
        assert!(err.contains(&f.display().to_string()) && err.contains(says), "{body:?}: {err}");
        left_nothing(dir.path());
    }
    let out = cluster(dir.path()).args(["up", "--values", "/no/such/values.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("reading /no/such/values.yaml"), "{}", text(&out.stderr));
    left_nothing(dir.path());
}
