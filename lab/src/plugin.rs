//! Device plugin health from real netlink link events: the daemon (`kube_rdma_device_plugin::daemon`)
//! serves rxe as a shared-mode pool; a minimal kubelet stand-in takes its registration; setting rxe's
//! netdev down and up must reach ListAndWatch (Unhealthy, then Healthy) within 1 s each.

use crate::events::set_up;
use crate::harness::{Lab, Test};
use crate::util::ifindex;
use anyhow::Context;
use kube_rdma_device_plugin::api::device_plugin_client::DevicePluginClient;
use kube_rdma_device_plugin::api::registration_server::{Registration, RegistrationServer};
use kube_rdma_device_plugin::api::{Empty, ListAndWatchResponse, RegisterRequest};
use kube_rdma_device_plugin::{daemon, kubelet};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status, Streaming};

pub fn tests() -> Vec<Test> {
    vec![Test { name: "plugin-listandwatch-health-from-link-events-within-1s", run: health }]
}

/// The kubelet's Registration service, recording each request.
struct Kubelet(mpsc::UnboundedSender<RegisterRequest>);

#[tonic::async_trait]
impl Registration for Kubelet {
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let _ = self.0.send(req.into_inner());
        Ok(Response::new(Empty {}))
    }
}

async fn next(
    s: &mut Streaming<ListAndWatchResponse>,
    within: Duration,
) -> anyhow::Result<ListAndWatchResponse> {
    tokio::time::timeout(within, s.message())
        .await
        .with_context(|| format!("no ListAndWatch update within {within:?}"))??
        .context("ListAndWatch stream ended")
}

/// Waits for an update whose devices all have `health`; returns it and the time taken.
async fn until(
    s: &mut Streaming<ListAndWatchResponse>,
    health: &str,
) -> anyhow::Result<(ListAndWatchResponse, Duration)> {
    let t = Instant::now();
    let deadline = Duration::from_secs(1);
    loop {
        let left = deadline.checked_sub(t.elapsed()).unwrap_or_default();
        let r = next(s, left).await.with_context(|| format!("waiting for {health}"))?;
        if !r.devices.is_empty() && r.devices.iter().all(|d| d.health == health) {
            return Ok((r, t.elapsed()));
        }
    }
}

fn health(lab: &Lab) -> anyhow::Result<String> {
    let base = PathBuf::from("/tmp/lab-plugin");
    let _ = std::fs::remove_dir_all(&base);
    let (kdir, cdi, devinfo) = (base.join("kubelet"), base.join("cdi"), base.join("devinfo"));
    for d in [&kdir, &cdi, &devinfo] {
        std::fs::create_dir_all(d)?;
    }
    let config = base.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "pools:\n  - name: lab_rxe\n    mode: shared\n    rdmaHcaMax: 2\n    selectors: {{ifNames: [{}]}}\n",
            lab.rxe_netdev
        ),
    )?;
    let netdev_index = ifindex(&lab.rxe_netdev)?;
    // What one rescan costs here (TCG is far slower than a node): reported with the latencies.
    let t = Instant::now();
    let _ = nic::discover(&nic::Roots { sysfs: "/sys".into(), dev: "/dev".into() });
    let scan = t.elapsed();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let res = rt.block_on(async {
        let (reg_tx, mut reg_rx) = mpsc::unbounded_channel();
        let listener = tokio::net::UnixListener::bind(kdir.join(kubelet::KUBELET_SOCKET))?;
        let (kstop_tx, kstop_rx) = oneshot::channel::<()>();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(Kubelet(reg_tx)))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = kstop_rx.await;
                }),
        );
        let opts = daemon::Options {
            config: Some(config.clone()),
            roots: nic::Roots { sysfs: "/sys".into(), dev: "/dev".into() },
            kubelet_dir: kdir.clone(),
            // Only link events may explain a quick update: the timer is far away.
            rescan_interval: Duration::from_secs(3600),
            rescan_deadline: Duration::from_secs(10),
            cdi_dir: cdi.clone(),
            devinfo_dir: devinfo.clone(),
            metrics_addr: None,
            link_events: true,
            // No kubelet in the lab VM: nothing to ask.
            pod_resources: None,
            pod_resources_interval: Duration::from_secs(10),
            // The lab's kubelet opens ListAndWatch right after Register (below).
            registration: Default::default(),
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let d = tokio::spawn(daemon::run(opts, async {
            let _ = stop_rx.await;
        }));
        let out = async {
            let reg = tokio::time::timeout(Duration::from_secs(10), reg_rx.recv())
                .await
                .context("the plugin did not register within 10 s")?
                .context("registration channel closed")?;
            anyhow::ensure!(reg.version == "v1beta1", "registered with version {}", reg.version);
            let ch = kubelet::connect_unix(&kdir.join(&reg.endpoint)).await?;
            let mut c = DevicePluginClient::new(ch);
            let mut s = c.list_and_watch(Empty {}).await?.into_inner();
            let first = next(&mut s, Duration::from_secs(5)).await?;
            if first.devices.len() != 2 {
                // Say why: what discovery sees of the RDMA devices and the pool's selection.
                let inv = nic::discover::discover_scoped(
                    &nic::Roots { sysfs: "/sys".into(), dev: "/dev".into() },
                    nic::discover::Scope { gid_tables: false, ..Default::default() },
                );
                let hcas: Vec<_> =
                    inv.hcas.iter().map(|h| (&h.rdma.name, &h.netdevs, h.rdma.in_other_netns)).collect();
                let cfg = kube_rdma_device_plugin::config::Config::load(&config)?;
                let plan = kube_rdma_device_plugin::pools::plan(&inv, &cfg);
                anyhow::bail!(
                    "first list: {:?}; discovered HCAs {hcas:?}; decisions {:?}; netns mode {:?}",
                    first.devices,
                    plan.decisions,
                    nic::vfdev::netns_mode_from_sysfs(&nic::Roots { sysfs: "/sys".into(), dev: "/dev".into() })
                );
            }
            anyhow::ensure!(
                first.devices.iter().all(|d| d.health == "Healthy"),
                "first list: {:?}",
                first.devices
            );
            set_up(netdev_index, false)?;
            let (_, t_down) = until(&mut s, "Unhealthy")
                .await
                .with_context(|| format!("after link down (one discover takes {} ms in this VM)", scan.as_millis()))?;
            set_up(netdev_index, true)?;
            let (_, t_up) = until(&mut s, "Healthy")
                .await
                .with_context(|| format!("after link up (one discover takes {} ms in this VM)", scan.as_millis()))?;
            Ok::<_, anyhow::Error>(format!(
                "{}: 2 devices on {}; {} down -> Unhealthy in {} ms, up -> Healthy in {} ms (one discover: {} ms)",
                reg.resource_name,
                lab.rxe,
                lab.rxe_netdev,
                t_down.as_millis(),
                t_up.as_millis(),
                scan.as_millis()
            ))
        }
        .await;
        let _ = stop_tx.send(());
        let _ = kstop_tx.send(());
        match tokio::time::timeout(Duration::from_secs(5), d).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) if out.is_ok() => anyhow::bail!("daemon: {e}"),
            _ => {}
        }
        out
    });
    let _ = set_up(netdev_index, true);
    let _ = std::fs::remove_dir_all(&base);
    res
}
