//! A real runtime: podman 4 with its CNI backend runs a container on a
//! conflist whose plugin is `kube-rdma-cni`. Inside, the interface has its
//! address; after `--rm` the VF is back on the host under its original name
//! and the IPAM allocation is released.
//!
//! Self-contained: containers.conf (via `CONTAINERS_CONF`), storage, network
//! config dir and image all live in a temp dir; the image is `podman import`
//! of a busybox-static root. Needs Debian packages podman,
//! containernetworking-plugins, runc, busybox-static.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::json;

struct Podman<'a> {
    dir: &'a Path,
    host_ns: &'a str,
    sysfs: &'a Path,
}

impl Podman<'_> {
    /// podman started inside the lab's host netns (setns before exec; not
    /// `ip netns exec`, whose private /sys hides the cgroup mount runc needs):
    /// the plugin sees that netns as "the host", so the machine's own links
    /// are never touched.
    fn run(&self, args: &[&str]) -> std::process::Output {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let d = self.dir;
        let ns = std::fs::File::open(Path::new("/run/netns").join(self.host_ns)).unwrap();
        let fd = ns.as_raw_fd();
        let mut c = Command::new("podman");
        // SAFETY: setns is async-signal-safe; the fd is open until exec.
        unsafe {
            c.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c.arg("--root")
            .arg(d.join("storage"))
            .arg("--runroot")
            .arg(d.join("run"))
            .arg("--tmpdir")
            .arg(d.join("tmp"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--runtime",
                "runc",
                "--events-backend",
                "file",
            ])
            .arg("--network-config-dir")
            .arg(d.join("net.d"))
            .args(args)
            .env("CONTAINERS_CONF", d.join("containers.conf"))
            .env("KUBE_RDMA_SYSFS_ROOT", self.sysfs)
            .env("KUBE_RDMA_CNI_NODE_DIR", node_dir_of(self.sysfs))
            .env("TMPDIR", d.join("tmp"))
            .output()
            .expect("run podman")
    }
}

fn busybox_rootfs_tar(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    for d in ["proc", "sys", "dev", "etc", "tmp", "run"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/usr/bin/busybox", root.join("bin/busybox")).unwrap();
    for app in ["sh", "ip", "cat", "sleep", "ls"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(app)).unwrap();
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    let tar = dir.join("rootfs.tar");
    let st = Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(&tar).arg(".").status().unwrap();
    assert!(st.success());
    tar
}

#[test]
fn podman_runs_a_container_on_a_kube_rdma_cni_network_and_gives_the_vf_back() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for sub in ["storage", "run", "tmp", "net.d", "bin"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    std::fs::copy(BIN, d.join("bin/kube-rdma-cni")).unwrap();
    // The plugin's environment for every podman, including the one conmon
    // starts to clean up after the container (the DEL), which does not get
    // this process's environment: the lab's node, and a stateDir in the temp dir.
    std::fs::write(
        d.join("containers.conf"),
        format!(
            "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\n\
             [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [\"{}\", \"{CNI_PATH}\"]\nnetwork_config_dir = \"{}\"\n\n\
             [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\nruntime = \"runc\"\n\
             env = [\"KUBE_RDMA_CNI_STATE_ROOT={}\", \"KUBE_RDMA_SYSFS_ROOT={}\", \"KUBE_RDMA_CNI_NODE_DIR={}\"]\n",
            d.join("bin").display(),
            d.join("net.d").display(),
            state_root().display(),
            lab.sim.roots().sysfs.display(),
            node_dir_of(&lab.sim.roots().sysfs).display(),
        ),
    )
    .unwrap();
    // podman 4.3 rejects 1.1.0 results: a 1.0.0 conflist must get a 1.0.0 result.
    let conflist = json!({
        "cniVersion": "1.0.0",
        "name": format!("kr{}", lab.tag),
        "plugins": [{
            "type": "kube-rdma-cni",
            "deviceID": pci.to_string(),
            "stateDir": lab.state.path(),
            "mtu": 1400,
            "ipam": {"type": "host-local", "dataDir": lab.ipam_dir.path(), "ranges": [[{"subnet": "10.230.7.0/24"}]]}
        }]
    });
    std::fs::write(d.join("net.d/kr.conflist"), serde_json::to_vec_pretty(&conflist).unwrap()).unwrap();
    let pm = Podman { dir: d, host_ns: lab.host.name(), sysfs: &lab.sim.roots().sysfs };
    let tar = busybox_rootfs_tar(d);
    let image = format!("localhost/kr-busybox:{}", lab.tag);
    let out = pm.run(&["import", tar.to_str().unwrap(), &image]);
    assert!(out.status.success(), "podman import: {}", String::from_utf8_lossy(&out.stderr));

    let net = format!("kr{}", lab.tag);
    let out = pm.run(&[
        "run",
        "--rm",
        "--network",
        &net,
        &image,
        "/bin/sh",
        "-c",
        "ip -o addr show eth0; ip -o link show eth0",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "podman run failed\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("inet 10.230.7.2/24"), "no address inside the container: {stdout}");
    assert!(stdout.contains("mtu 1400"), "MTU not applied: {stdout}");

    // After --rm: the VF is home under its name with its settings; nothing leaked.
    assert!(lab.host_links().contains(&vfname), "VF not back on the host: {:?}", lab.host_links());
    assert_eq!(link_info(lab.host.name(), &vfname), before);
    assert!(lab.ipam_allocations().is_empty(), "IPAM leaked: {:?}", lab.ipam_allocations());
    assert!(lab.state_files().is_empty(), "state leaked: {:?}", lab.state_files());
    let _ = pm.run(&["rmi", "-f", &image]);
}
