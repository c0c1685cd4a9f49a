//! Pod start latency (issue 20): a pod with one of our VFs and its Multus
//! network against a plain busybox pod, measured in the same run, alternating,
//! from the pod's first watch event (created) to the event that shows it Running
//! with its container ready. Both sides pay the same API round trips, so the
//! ratio is what the VF (Allocate, CDI, Multus, kube-rdma-cni) costs.
//!
//! One measurement, two callers: the suite's printed-only case
//! (`device_plugin_bench_vf_pod_start_against_a_plain_pod`, in the first lane: it
//! holds at most one VF at a time and restarts nothing) and `cargo bench -p
//! kube-rdma-e2e --bench pod_start`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kube_rdma_e2e::cluster;

use crate::ctx::{busybox_pod, Ctx};
use crate::pools::{self, res, NET, RDMA};

/// Issue 20's target for the VF pod's median against the plain pod's.
pub const TARGET: f64 = 1.25;

/// Pods of each kind the suite's case starts (issue 20: median of 10 each).
pub const STARTS: usize = 10;

/// Medians (and every sample) of both kinds of pod.
pub struct Latency {
    /// Pod with one VF of `rdma_vfs` and the `rdma-net` network.
    pub vf: Vec<Duration>,
    /// Plain busybox pod.
    pub plain: Vec<Duration>,
}

impl Latency {
    /// Median of the VF pods.
    pub fn vf_median(&self) -> Duration {
        median(&self.vf)
    }
    /// Median of the plain pods.
    pub fn plain_median(&self) -> Duration {
        median(&self.plain)
    }
    /// VF median / plain median.
    pub fn ratio(&self) -> f64 {
        self.vf_median().as_secs_f64() / self.plain_median().as_secs_f64()
    }
    /// [`Latency::report`] and whether the ratio meets [`TARGET`]. Printed, never
    /// asserted (CONTRIBUTING.md, Benchmarks: a loaded machine must not fail a test).
    pub fn summary(&self) -> String {
        let met = if self.ratio() <= TARGET { "met" } else { "MISSED" };
        format!("{}\ntarget <= {TARGET:.2}x: {met}", self.report())
    }

    /// One line per kind and the ratio.
    pub fn report(&self) -> String {
        let ms =
            |v: &[Duration]| v.iter().map(|d| format!("{}", d.as_millis())).collect::<Vec<_>>().join(" ");
        format!(
            "pod start, median of {n} each: VF + Multus {vf:.0} ms, plain {plain:.0} ms, ratio {ratio:.2}\n  \
             VF ms:    {vfs}\n  plain ms: {plains}",
            n = self.vf.len(),
            vf = self.vf_median().as_secs_f64() * 1e3,
            plain = self.plain_median().as_secs_f64() * 1e3,
            ratio = self.ratio(),
            vfs = ms(&self.vf),
            plains = ms(&self.plain),
        )
    }
}

fn median(v: &[Duration]) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    match s.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2,
    }
}

/// Starts `n` pods of each kind, one at a time, alternating; each is deleted
/// before the next starts (the node has 4 VFs).
pub fn measure(ctx: &Ctx, n: usize) -> Result<Latency> {
    pools::ensure(ctx, false)?;
    let mut watch = cluster::kubectl(&ctx.layout)
        .args([
            "-n",
            "default",
            "get",
            "pods",
            "--watch",
            "-o",
            "jsonpath={.metadata.name} {.status.phase} {.status.containerStatuses[0].ready}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("kubectl get pods --watch")?;
    let out = watch.stdout.take().context("watch stdout")?;
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    let r = (|| {
        let mut lat = Latency { vf: vec![], plain: vec![] };
        for i in 0..n {
            for vf in [true, false] {
                let name = format!("bench-{}-{i}", if vf { "vf" } else { "plain" });
                let manifest = if vf {
                    let extra = format!("      resources:\n        limits:\n          {}: 1\n", res(RDMA));
                    busybox_pod("default", &name, &extra, &format!("k8s.v1.cni.cncf.io/networks: {NET}"))
                } else {
                    busybox_pod("default", &name, "", "")
                };
                ctx.apply(&manifest)?;
                let d = time_to_ready(&rx, &name, Duration::from_secs(120));
                ctx.delete("default", "pod", &name)?;
                let d = d?;
                if vf {
                    lat.vf.push(d);
                } else {
                    lat.plain.push(d);
                };
            }
        }
        Ok(lat)
    })();
    let _ = watch.kill();
    let _ = watch.wait();
    r
}

/// From the first watch event naming `name` to the first showing it Running and ready.
fn time_to_ready(rx: &mpsc::Receiver<(Instant, String)>, name: &str, timeout: Duration) -> Result<Duration> {
    let t0 = Instant::now();
    let mut seen: Option<Instant> = None;
    loop {
        let left = timeout.checked_sub(t0.elapsed()).context("timed out")?;
        let (t, line) = match rx.recv_timeout(left) {
            Ok(x) => x,
            Err(_) => bail!("pod {name} not Running and ready after {timeout:?}"),
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&name) {
            continue;
        }
        let first = *seen.get_or_insert(t);
        if f.get(1) == Some(&"Running") && f.get(2) == Some(&"true") {
            return Ok(t - first);
        }
    }
}
