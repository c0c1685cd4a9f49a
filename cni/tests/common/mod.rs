//! Test lab for the CNI: a simulated node tree whose VF netdevs are real veth
//! links in a private "host" netns (the plugin runs there, so the machine's
//! own root netns is never touched), pod netns, and the real binary.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use nic::netns::NamedNetns;
use nic::sim::Sim;
use nic::PciAddr;
use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_kube-rdma-cni");
pub const CNI_PATH: &str = "/usr/lib/cni";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short unique tag (netdev names have 15 bytes).
pub fn tag() -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("{:03x}{:02x}", std::process::id() % 4096, n % 256)
}

pub struct Lab {
    pub tag: String,
    pub sim: Sim,
    pub host: NamedNetns,
    pub wire: NamedNetns,
    pub state: tempfile::TempDir,
    pub ipam_dir: tempfile::TempDir,
    /// `(VF address, netdev name)`.
    pub vfs: Vec<(PciAddr, String)>,
    pub pf: PciAddr,
}

pub fn ip(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip").arg("-n").arg(ns).args(args).output().expect("run ip");
    // The status too: a CI run once saw this fail with nothing on stderr (a signal?).
    assert!(
        out.status.success(),
        "ip -n {ns} {args:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn ip_ok(ns: &str, args: &[&str]) -> bool {
    Command::new("ip")
        .arg("-n")
        .arg(ns)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Link names in a netns (without `lo`).
pub fn links(ns: &str) -> BTreeSet<String> {
    ip(ns, &["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| n != "lo")
        .collect()
}

/// `ip -j addr show dev X` → list of "addr/prefix".
pub fn addrs(ns: &str, dev: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(&ip(ns, &["-j", "addr", "show", "dev", dev])).unwrap();
    v[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["scope"] != "link")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// `ip -j link show dev X` → (mac, mtu, up).
pub fn link_info(ns: &str, dev: &str) -> (String, u64, bool) {
    let v: Value = serde_json::from_str(&ip(ns, &["-j", "link", "show", "dev", dev])).unwrap();
    let flags: Vec<&str> = v[0]["flags"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    (v[0]["address"].as_str().unwrap().to_string(), v[0]["mtu"].as_u64().unwrap(), flags.contains(&"UP"))
}

/// Every file under `dir` (relative paths), for leak checks.
pub fn files(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    fn walk(base: &Path, d: &Path, out: &mut BTreeSet<String>) {
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(base, &p, out);
                } else {
                    out.insert(p.strip_prefix(base).unwrap().display().to_string());
                }
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

impl Lab {
    /// A node with one PF of `model` and `nvfs` VFs; `pf_extra` is added to
    /// the PF's YAML map (e.g. `vfRdma: true`).
    pub fn new(model: &str, nvfs: u32, pf_extra: &str) -> Lab {
        let tag = tag();
        let bus = 0x10 + (COUNTER.load(Ordering::SeqCst) % 200) as u8;
        let yaml = format!(
            "node: t{tag}\nadapters:\n  - model: {model}\n    pfs:\n      - bdf: \"0000:{bus:02x}:00.0\"\n        netdev: k{tag}p\n        vfs: {nvfs}\n        totalVfs: {nvfs}\n        vfNetdevPrefix: k{tag}v\n{pf_extra}"
        );
        let desc: nic::simdesc::NodeDesc =
            serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let sim = Sim::materialise(&desc).expect("materialise sim");
        let roots = sim.roots();
        let pf: PciAddr = format!("0000:{bus:02x}:00.0").parse().unwrap();
        let mut vfs = Vec::new();
        for i in 0..nvfs {
            let link = roots.sys(format!("bus/pci/devices/{pf}/virtfn{i}"));
            let vf: PciAddr =
                std::fs::read_link(&link).unwrap().file_name().unwrap().to_str().unwrap().parse().unwrap();
            // A VF bound to vfio-pci has no netdev (name "").
            let net = std::fs::read_dir(roots.sys(format!("bus/pci/devices/{vf}/net")))
                .ok()
                .and_then(|mut d| d.next())
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .unwrap_or_default();
            vfs.push((vf, net));
        }
        let host = NamedNetns::create(&format!("kr-{tag}-host")).unwrap();
        let wire = NamedNetns::create(&format!("kr-{tag}-wire")).unwrap();
        let mut batch = String::new();
        for (i, (_, name)) in vfs.iter().enumerate().filter(|(_, (_, n))| !n.is_empty()) {
            batch
                .push_str(&format!("link add {name} type veth peer name k{tag}w{i} netns {}\n", wire.name()));
            batch.push_str(&format!("link set {name} mtu 1500\n"));
        }
        let mut child = Command::new("ip")
            .args(["-n", host.name(), "-batch", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(batch.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success(), "creating veths failed");
        Lab {
            tag,
            sim,
            host,
            wire,
            state: tempfile::tempdir().unwrap(),
            ipam_dir: tempfile::tempdir().unwrap(),
            vfs,
            pf,
        }
    }

    pub fn pod(&self, n: u32) -> NamedNetns {
        let ns = NamedNetns::create(&format!("kr-{}-pod{n}", self.tag)).unwrap();
        ip(ns.name(), &["link", "set", "lo", "up"]);
        ns
    }

    pub fn host_links(&self) -> BTreeSet<String> {
        links(self.host.name())
    }

    /// Writes `module/ib_core/parameters/netns_mode` into the sim tree.
    pub fn set_rdma_netns_mode(&self, shared: bool) {
        let p = self.sim.roots().sys("module/ib_core/parameters");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("netns_mode"), if shared { "Y\n" } else { "N\n" }).unwrap();
    }

    /// A config using host-local with a private dataDir.
    pub fn conf(&self, version: &str, pci: PciAddr, subnet: &str) -> Value {
        json!({
            "cniVersion": version,
            "name": format!("net-{}", self.tag),
            "type": "kube-rdma-cni",
            "deviceID": pci.to_string(),
            "stateDir": self.state.path(),
            "ipam": {
                "type": "host-local",
                "dataDir": self.ipam_dir.path(),
                "ranges": [[{"subnet": subnet}]],
                "routes": [{"dst": "10.250.0.0/16"}]
            }
        })
    }

    /// Runs the plugin inside the lab's host netns.
    pub fn cni(&self, cmd: &str, cid: &str, netns: &Path, ifname: &str, stdin: &Value) -> (i32, Value) {
        self.cni_env(cmd, cid, netns, ifname, stdin, &[])
    }

    pub fn cni_env(
        &self,
        cmd: &str,
        cid: &str,
        netns: &Path,
        ifname: &str,
        stdin: &Value,
        extra: &[(&str, &str)],
    ) -> (i32, Value) {
        run_plugin(
            self.host.path(),
            &self.sim.roots().sysfs,
            cmd,
            cid,
            netns,
            ifname,
            &serde_json::to_vec(stdin).unwrap(),
            extra,
        )
    }

    /// Starts the plugin in the lab's host netns and returns it running.
    pub fn spawn(
        &self,
        cmd: &str,
        cid: &str,
        netns: &Path,
        ifname: &str,
        stdin: &Value,
        extra: &[(&str, &str)],
    ) -> std::process::Child {
        spawn_plugin(
            self.host.path(),
            &self.sim.roots().sysfs,
            cmd,
            cid,
            netns,
            ifname,
            &serde_json::to_vec(stdin).unwrap(),
            extra,
            &[],
        )
    }

    /// The node dir the plugin is given ([`node_dir_of`]).
    pub fn node_dir(&self) -> PathBuf {
        node_dir_of(&self.sim.roots().sysfs)
    }

    /// The device-info directory the plugin is given ([`devinfo_dir_of`]), created.
    pub fn devinfo_dir(&self) -> PathBuf {
        let d = devinfo_dir_of(&self.sim.roots().sysfs);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The log directory the plugin is given ([`log_dir_of`]).
    pub fn log_dir(&self) -> PathBuf {
        log_dir_of(&self.sim.roots().sysfs)
    }

    /// The VF's lock file, node-wide (`<node dir>/locks/vf-<pci>.lock`).
    pub fn vf_lock(&self, pci: PciAddr) -> PathBuf {
        self.node_dir().join(format!("locks/vf-{pci}.lock"))
    }

    /// Files in the node dir other than lock files (records of VFs given
    /// out in userspace mode).
    pub fn node_files(&self) -> BTreeSet<String> {
        files(&self.node_dir()).into_iter().filter(|f| !f.starts_with("locks/")).collect()
    }

    /// Allocation files host-local keeps (one per allocated IP).
    pub fn ipam_allocations(&self) -> BTreeSet<String> {
        files(self.ipam_dir.path())
            .into_iter()
            .filter(|f| {
                let name = f.rsplit('/').next().unwrap_or(f);
                name.parse::<std::net::IpAddr>().is_ok()
            })
            .collect()
    }

    /// State files other than locks and the IPAM version cache.
    pub fn state_files(&self) -> BTreeSet<String> {
        files(self.state.path())
            .into_iter()
            .filter(|f| !f.starts_with("locks/") && f != "ipam-versions.json")
            .collect()
    }
}

/// Link and file names, sorted.
pub type Names = BTreeSet<String>;

/// Everything an ADD may change: host links, pod links, state files, IPAM
/// allocations, and name/MAC/MTU/state of each VF netdev on the host.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    host: Names,
    pod: Names,
    state: Names,
    ipam: Names,
    vfs: Vec<(String, u64, bool)>,
}

/// Scenario steps: one invocation that must succeed or fail with a given
/// code (its output in the panic message), and the journal and lock files
/// as another invocation would leave them.
impl Lab {
    /// Runs `cmd` for `(cid, ifname)` and expects it to succeed: its JSON
    /// (`null` where the spec prints nothing).
    #[track_caller]
    pub fn ok(&self, cmd: &str, cid: &str, netns: &Path, ifname: &str, conf: &Value) -> Value {
        let (code, out) = self.cni(cmd, cid, netns, ifname, conf);
        assert_eq!(code, 0, "{cmd} {cid}/{ifname}: {out}");
        out
    }

    /// ADD of `(cid, net1)`, which must succeed: its result.
    #[track_caller]
    pub fn add(&self, cid: &str, netns: &Path, conf: &Value) -> Value {
        self.ok("ADD", cid, netns, "net1", conf)
    }

    /// DEL of `(cid, net1)`, which must succeed.
    #[track_caller]
    pub fn del(&self, cid: &str, netns: &Path, conf: &Value) {
        self.ok("DEL", cid, netns, "net1", conf);
    }

    /// GC with `conf`, which must succeed.
    #[track_caller]
    pub fn gc(&self, conf: &Value) {
        self.ok("GC", "", Path::new(""), "", conf);
    }

    /// Runs `cmd` for `(cid, ifname)` and expects it to fail with `code`:
    /// the error's message.
    #[track_caller]
    pub fn refused(
        &self,
        cmd: &str,
        cid: &str,
        netns: &Path,
        ifname: &str,
        conf: &Value,
        code: i32,
    ) -> String {
        let (got, out) = self.cni(cmd, cid, netns, ifname, conf);
        assert_eq!(got, code, "{cmd} {cid}/{ifname}: {out}");
        out["msg"].as_str().unwrap_or_default().to_string()
    }

    /// What an ADD may change, now, with `pod` the pod netns's name.
    pub fn snapshot(&self, pod: &str) -> Snapshot {
        let host = self.host_links();
        let vfs = self
            .vfs
            .iter()
            .filter(|(_, n)| host.contains(n))
            .map(|(_, n)| link_info(self.host.name(), n))
            .collect();
        Snapshot { host, pod: links(pod), state: self.state_files(), ipam: self.ipam_allocations(), vfs }
    }

    /// The files of the state dir's `attachments/`.
    pub fn journal_files(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.state.path().join("attachments")).unwrap().map(|e| e.unwrap().path()).collect()
    }

    /// The journal of `(cid, ifname)` as JSON, and its file.
    pub fn journal_of(&self, cid: &str, ifname: &str) -> (PathBuf, Value) {
        let p = self.state.path().join(format!("attachments/{cid}:{ifname}.json"));
        let j = serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            .unwrap();
        (p, j)
    }

    /// Inserts `step` into the journal of `(cid, ifname)` at `at`, as an ADD
    /// that planned it would have written it.
    pub fn add_journal_step(&self, cid: &str, ifname: &str, at: usize, step: Value) {
        let (p, mut j) = self.journal_of(cid, ifname);
        j["steps"].as_array_mut().unwrap().insert(at, step);
        std::fs::write(&p, j.to_string()).unwrap();
    }

    /// Puts first in the journal of `(cid, net1)` the PF-side step an ADD
    /// that set VF attributes of VF 0 on `pf` journals: `restore` names the
    /// values it replaced (e.g. `{"trust": false}` for `"trust": "on"`).
    pub fn journal_pf_attrs(&self, cid: &str, pf: &str, restore: Value) {
        let mut all = json!({"mac": null, "vlan": null, "spoofchk": null, "trust": null, "rate": null, "linkState": null});
        for (k, v) in restore.as_object().unwrap() {
            all[k] = v.clone();
        }
        self.add_journal_step(cid, "net1", 0, json!({"pfAttrs": {"pfNetdev": pf, "vf": 0, "restore": all}}));
    }

    /// A stand-in PF netdev on the host, named as the simulated PF: a veth,
    /// which refuses VF attributes (`EOPNOTSUPP`), as a PF driver that lost
    /// its VFs' state does. Its name.
    pub fn stand_in_pf(&self) -> String {
        let pf = format!("k{}p", self.tag);
        ip(
            self.host.name(),
            &["link", "add", &pf, "type", "veth", "peer", "name", &format!("k{}q", self.tag)],
        );
        pf
    }

    /// Takes the VF lock `<node dir>/locks/vf-<pci>.lock` as another ADD/DEL
    /// of the VF holds it; released when the file is dropped.
    pub fn hold_vf_lock(&self, pci: PciAddr) -> std::fs::File {
        let path = self.vf_lock(pci);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).unwrap();
        f.lock().unwrap();
        f
    }
}

/// The node dir (`KUBE_RDMA_CNI_NODE_DIR`: VF locks, userspace VF records)
/// of the simulated node whose sysfs is at `sysfs`: beside it, so that each
/// lab has its own, as each node has.
pub fn node_dir_of(sysfs: &Path) -> PathBuf {
    sysfs.parent().expect("the sim's sysfs has a parent").join("cni-node")
}

/// The device-info directory (`KUBE_RDMA_CNI_DEVINFO_DIR`, Multus's
/// `/var/run/k8s.cni.cncf.io/devinfo/cni` on a node) of the simulated node
/// whose sysfs is at `sysfs`: the only place `CNIDeviceInfoFile` may name.
pub fn devinfo_dir_of(sysfs: &Path) -> PathBuf {
    sysfs.parent().expect("the sim's sysfs has a parent").join("devinfo-cni")
}

/// The log directory (`KUBE_RDMA_CNI_LOG_DIR`, `/var/log/kube-rdma-cni` on
/// a node) of that simulated node: the only place `logFile` may name.
pub fn log_dir_of(sysfs: &Path) -> PathBuf {
    sysfs.parent().expect("the sim's sysfs has a parent").join("cni-log")
}

/// The state root (`KUBE_RDMA_CNI_STATE_ROOT`, `/var/lib/cni` on a node)
/// and prepared root (`KUBE_RDMA_CNI_PREPARED_ROOT`) the plugin is given:
/// the temp dir, where the tests' `stateDir`s and `preparedDir`s are made.
pub fn state_root() -> PathBuf {
    std::env::temp_dir()
}

/// Runs the binary with `setns` into `host_ns` before exec.
#[allow(clippy::too_many_arguments)]
pub fn run_plugin(
    host_ns: &Path,
    sysfs: &Path,
    cmd: &str,
    cid: &str,
    netns: &Path,
    ifname: &str,
    stdin: &[u8],
    extra: &[(&str, &str)],
) -> (i32, Value) {
    // CNI_TEST_WRAP="strace -f -c -o /tmp/x" runs the plugin under a tool (profiling).
    let wrap: Vec<String> = std::env::var("CNI_TEST_WRAP")
        .map(|w| w.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let child = spawn_plugin(host_ns, sysfs, cmd, cid, netns, ifname, stdin, extra, &wrap);
    let out = child.wait_with_output().unwrap();
    let v = if out.stdout.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("stdout not JSON ({e}): {:?}", String::from_utf8_lossy(&out.stdout)))
    };
    if std::env::var("CNI_TEST_VERBOSE").is_ok() {
        eprintln!("{cmd} -> {:?} {v} stderr: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    }
    // Failures report the CNI error code from the JSON; a killed plugin its exit status.
    let status = out.status.code().unwrap_or(-1);
    let code = if status == 0 {
        0
    } else {
        v.get("code").and_then(Value::as_i64).map(|c| c as i32).unwrap_or(status)
    };
    (code, v)
}

/// Starts the binary (under `wrap`, a tool and its arguments, if not empty)
/// in `host_ns` with the CNI environment and `stdin`, as a runtime does, and
/// returns it running (for tests that kill it).
#[allow(clippy::too_many_arguments)]
pub fn spawn_plugin(
    host_ns: &Path,
    sysfs: &Path,
    cmd: &str,
    cid: &str,
    netns: &Path,
    ifname: &str,
    stdin: &[u8],
    extra: &[(&str, &str)],
    wrap: &[String],
) -> std::process::Child {
    let nsf = std::fs::File::open(host_ns).unwrap();
    let fd = nsf.as_raw_fd();
    let mut c = match wrap.split_first() {
        Some((tool, args)) => {
            let mut c = Command::new(tool);
            c.args(args).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    // cargo test/bench set LD_LIBRARY_PATH to the toolchain's dirs; a runtime
    // does not, and the extra library search costs milliseconds per exec.
    c.env_remove("LD_LIBRARY_PATH")
        .env_remove("KUBE_RDMA_CNI_FAILPOINT")
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", CNI_PATH)
        .env("KUBE_RDMA_SYSFS_ROOT", sysfs)
        .env("KUBE_RDMA_CNI_NODE_DIR", node_dir_of(sysfs))
        .env("KUBE_RDMA_CNI_DEVINFO_DIR", devinfo_dir_of(sysfs))
        .env("KUBE_RDMA_CNI_LOG_DIR", log_dir_of(sysfs))
        .env("KUBE_RDMA_CNI_STATE_ROOT", state_root())
        .env("KUBE_RDMA_CNI_PREPARED_ROOT", state_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        if v.is_empty() {
            c.env_remove(k);
        } else {
            c.env(k, v);
        }
    }
    // SAFETY: setns is async-signal-safe; fd stays open until exec (cloexec).
    unsafe {
        c.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    drop(nsf);
    // A plugin refusing its environment may exit before reading stdin: a broken
    // pipe here is its answer, not a test failure.
    feed(child.stdin.take().unwrap(), stdin);
    child
}

pub fn path_of(ns: &NamedNetns) -> PathBuf {
    ns.path().to_path_buf()
}

/// A logging IPAM plugin for delegation tests, `DIR/bin/NAME`: appends
/// `<CNI_COMMAND> args=<CNI_ARGS> stdin=<stdin>` to `DIR/NAME.log`, says
/// `stub NAME: <command>` on stderr, speaks 0.4.0 to 1.1.0, answers ADD with
/// 10.77.0.5/24 and fails CHECK (code 7) while `DIR/NAME.fail` exists.
/// Returns (its bin dir, its log).
pub fn ipam_stub(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join(format!("{name}.log"));
    let fail = dir.join(format!("{name}.fail"));
    let script = format!(
        "#!/bin/sh\n\
         in=$(cat)\n\
         printf '%s args=%s stdin=%s\\n' \"$CNI_COMMAND\" \"$CNI_ARGS\" \"$in\" >> {log}\n\
         echo \"stub {name}: $CNI_COMMAND\" >&2\n\
         case \"$CNI_COMMAND\" in\n\
         VERSION) echo '{{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\",\"1.1.0\"]}}' ;;\n\
         ADD) echo '{{\"cniVersion\":\"1.1.0\",\"ips\":[{{\"address\":\"10.77.0.5/24\",\"gateway\":\"10.77.0.1\"}}]}}' ;;\n\
         CHECK) if [ -e {fail} ]; then echo '{{\"cniVersion\":\"1.1.0\",\"code\":7,\"msg\":\"lease of 10.77.0.5 is gone\"}}'; exit 1; fi ;;\n\
         esac\n",
        log = log.display(),
        fail = fail.display(),
    );
    let p = bin.join(name);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (bin, log)
}

/// The lines of a file (empty if missing).
pub fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p).unwrap_or_default().lines().map(str::to_string).collect()
}

/// Runs `cmd` of the real plugin for `cid` under `strace -f -y -e trace=SYSCALLS`
/// (every thread and child, descriptors named by path); the trace's lines.
pub fn strace_plugin(
    lab: &Lab,
    cmd: &str,
    cid: &str,
    pod: &Path,
    conf: &Value,
    syscalls: &str,
) -> Vec<String> {
    assert!(
        Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success()),
        "this test needs strace (Debian package strace)"
    );
    let trace = lab.state.path().join(format!("strace-{cmd}-{cid}.out"));
    let wrap: Vec<String> = ["strace", "-f", "-y", "-e", &format!("trace={syscalls}"), "-o"]
        .iter()
        .map(|s| s.to_string())
        .chain([trace.display().to_string()])
        .collect();
    let stdin = serde_json::to_vec(conf).unwrap();
    let child =
        spawn_plugin(lab.host.path(), &lab.sim.roots().sysfs, cmd, cid, pod, "net1", &stdin, &[], &wrap);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stdout));
    let l = lines(&trace);
    let _ = std::fs::remove_file(&trace);
    joined_calls(l)
}

/// strace's lines with each call interrupted by another task's
/// (`PID call(args <unfinished ...>` ... `PID <... call resumed>rest`) made
/// one line again, placed where the call returned.
pub fn joined_calls(lines: Vec<String>) -> Vec<String> {
    let mut open: std::collections::HashMap<String, String> = Default::default();
    let mut out = Vec::new();
    for l in lines {
        let (pid, rest) = l.split_once(' ').unwrap_or(("", &l));
        if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            open.insert(pid.to_string(), start.to_string());
        } else if let Some((_, tail)) =
            rest.trim_start().strip_prefix("<... ").and_then(|r| r.split_once(" resumed>"))
        {
            match open.remove(pid) {
                Some(start) => out.push(format!("{pid} {start}{tail}")),
                None => out.push(l.clone()),
            }
        } else {
            out.push(l);
        }
    }
    out.extend(open.into_iter().map(|(pid, start)| format!("{pid} {start} <unfinished ...>")));
    out
}

/// Writes `data` to a child's stdin and closes it; a child that exited without
/// reading all of it (broken pipe) is fine: its exit status and stdout say why.
pub fn feed(mut stdin: std::process::ChildStdin, data: &[u8]) {
    if let Err(e) = stdin.write_all(data) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "writing the plugin's stdin: {e}");
    }
}
