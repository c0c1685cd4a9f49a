//! Prometheus text of a simulated node, and the `/metrics` + `/healthz` endpoint over real TCP.
use std::sync::Arc;
use std::time::Duration;

use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::fixtures::{example, with_roce, SimNode};
use kube_rdma_operator::health::{serve, Endpoints, Health};
use kube_rdma_operator::metrics::render;
use kube_rdma_operator::status::evaluate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn text() -> String {
    let d = with_roce(example("cx6dx-dual"), |r| {
        r.pfc_requests = vec![0, 0, 0, 1234, 0, 0, 0, 0];
        r.pfc_indications = vec![0, 0, 0, 99, 0, 0, 0, 0];
    });
    let mut d = d;
    d.adapters[0].pfs[1].mtu = 1500;
    let sim = SimNode::new(&d);
    let node = sim.read();
    let s = evaluate(&default_profile(), &node);
    render(&node, &s.checks)
}

#[test]
fn exposes_checks_pfc_pause_frames_ecn_mtu_and_gid_index() {
    let t = text();
    for line in [
        "kuberdma_node_roce_ready 0",
        "kuberdma_check_passing{interface=\"ens1f0np0\",check=\"pfc\"} 1",
        "kuberdma_check_passing{interface=\"ens1f1np1\",check=\"mtu\"} 0",
        "kuberdma_check_result{interface=\"ens1f0np0\",check=\"fw-lldp-agent\",result=\"NotApplicable\"} 1",
        "kuberdma_pfc_enabled{interface=\"ens1f0np0\",priority=\"3\"} 1",
        "kuberdma_pfc_enabled{interface=\"ens1f0np0\",priority=\"0\"} 0",
        "kuberdma_pfc_pause_frames_total{interface=\"ens1f0np0\",priority=\"3\",direction=\"tx\"} 1234",
        "kuberdma_pfc_pause_frames_total{interface=\"ens1f0np0\",priority=\"3\",direction=\"rx\"} 99",
        "kuberdma_ecn_enabled{interface=\"ens1f0np0\",priority=\"3\"} 1",
        "kuberdma_mtu_bytes{interface=\"ens1f1np1\"} 1500",
        "kuberdma_roce_active_mtu_bytes{interface=\"ens1f0np0\"} 4096",
        "kuberdma_gid_index{interface=\"ens1f0np0\"} 3",
        "# TYPE kuberdma_pfc_pause_frames_total counter",
        "# TYPE kuberdma_rdma_hw_stats_total counter",
        "kuberdma_rdma_hw_stats_total{interface=\"ens1f0np0\",counter=\"np_cnp_sent\"} 0",
    ] {
        assert!(t.lines().any(|l| l == line), "missing `{line}` in\n{t}");
    }
    // Prometheus adds `node` from the scrape target; a label of our own would come out as
    // `exported_node`.
    assert!(!t.contains("node=\""), "a series carries its own node label:\n{t}");
    // Every sample line is `name{labels} number`.
    for l in t.lines().filter(|l| !l.starts_with('#')) {
        let (_, v) = l.rsplit_once(' ').unwrap();
        assert!(v.parse::<f64>().is_ok(), "{l}");
    }
}

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    resp
}

#[tokio::test]
async fn the_endpoint_serves_metrics_and_health_over_http() {
    // The text first: building and reading the simulated node can take longer than the
    // health deadline on a loaded machine, which would fail the first /healthz below.
    let text = text();
    let health = Health::new("agent", Duration::from_millis(200));
    let h = health.clone();
    let t = text.clone();
    let ep = Endpoints { metrics: Arc::new(move || format!("{t}{}", h.render())), health: health.clone() };
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(serve(l, ep));
    let resp = get(addr, "/metrics").await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert!(resp.contains("Content-Type: text/plain; version=0.0.4"));
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    assert!(body.starts_with(&text));
    assert!(body.contains("kuberdma_agent_last_success_timestamp_seconds 0.000"), "{body}");
    assert!(body.contains("kuberdma_api_errors_total{kind=\"conflict\"} 0"), "{body}");
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200 OK\r\n"));
    // No successful pass for longer than allowed: unhealthy, with the reason.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let resp = get(addr, "/healthz").await;
    assert!(resp.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{resp}");
    assert!(resp.contains("no successful pass yet"), "{resp}");
    health.pass_ok(Duration::from_millis(12));
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200 OK\r\n"));
    let body = get(addr, "/metrics").await;
    assert!(body.contains("kuberdma_agent_pass_duration_seconds 0.012000"), "{body}");
    assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404 Not Found\r\n"));
    task.abort();
}

#[test]
fn exposes_the_rdma_protocol_of_each_interface() {
    let sim = SimNode::new(&example("e810-c-iwarp"));
    let node = sim.read();
    let s = evaluate(&default_profile(), &node);
    let t = render(&node, &s.checks);
    for line in [
        "# TYPE kuberdma_rdma_protocol gauge",
        "kuberdma_rdma_protocol{interface=\"ens3f0\",protocol=\"iWARP\"} 1",
        "kuberdma_rdma_protocol{interface=\"ens3f1\",protocol=\"RoCEv2\"} 1",
        "kuberdma_check_passing{interface=\"ens3f0\",check=\"rdma-protocol\"} 0",
        "kuberdma_check_passing{interface=\"ens3f1\",check=\"rdma-protocol\"} 1",
    ] {
        assert!(t.lines().any(|l| l == line), "missing `{line}` in\n{t}");
    }
    // One series per interface: the protocol it runs, never the ones it does not.
    assert_eq!(t.lines().filter(|l| l.starts_with("kuberdma_rdma_protocol{")).count(), 2);
}

#[test]
fn port_counters_of_pfs_and_host_visible_vfs_are_exported_with_data_in_bytes() {
    let sim = SimNode::new(&example("cx6dx-dual"));
    let roots = sim.sim.roots();
    let inv = nic::discover::discover(&roots);
    let pf = inv.pfs.iter().find(|p| p.netdevs.iter().any(|n| n.name == "ens1f0np0")).unwrap();
    let pf_rdma = &pf.rdma[0].name;
    let vf = pf.vfs.iter().find(|v| v.index == 2).unwrap();
    let vf_rdma = &vf.rdma[0].name;
    let port = |dev: &str, f: &str| roots.sys(format!("class/infiniband/{dev}/ports/1/{f}"));
    // The kernel counts data in 4-octet words.
    std::fs::write(port(pf_rdma, "counters/port_xmit_data"), "1000\n").unwrap();
    std::fs::write(port(pf_rdma, "counters/symbol_error"), "7\n").unwrap();
    std::fs::write(port(vf_rdma, "counters/port_rcv_data"), "25\n").unwrap();
    std::fs::write(port(vf_rdma, "counters/link_downed"), "2\n").unwrap();
    let node = sim.read();
    let t = render(&node, &evaluate(&default_profile(), &node).checks);
    for line in [
        "# TYPE kuberdma_rdma_port_transmitted_bytes_total counter",
        "kuberdma_rdma_port_transmitted_bytes_total{interface=\"ens1f0np0\"} 4000",
        "kuberdma_rdma_port_received_bytes_total{interface=\"ens1f0np0\"} 0",
        "kuberdma_rdma_port_stats_total{interface=\"ens1f0np0\",counter=\"symbol_error\"} 7",
        "kuberdma_rdma_port_stats_total{interface=\"ens1f0np0\",counter=\"port_rcv_errors\"} 0",
        "# TYPE kuberdma_vf_port_received_bytes_total counter",
        "kuberdma_vf_port_received_bytes_total{interface=\"ens1f0np0\",vf=\"2\"} 100",
        "kuberdma_vf_port_stats_total{interface=\"ens1f0np0\",vf=\"2\",counter=\"link_downed\"} 2",
    ] {
        assert!(t.lines().any(|l| l == line), "missing `{line}` in\n{t}");
    }
    // The data counters appear once, in bytes, not again among the raw counts.
    assert!(!t.contains("counter=\"port_xmit_data\""), "{t}");
    // mlx5's hw_counters/lifespan is a setting (the driver's cache time), not a count.
    assert!(std::fs::read_to_string(port(pf_rdma, "hw_counters/lifespan")).is_ok());
    assert!(!t.contains("lifespan"), "{t}");
}

#[test]
fn a_vf_moved_into_a_pods_namespace_has_no_port_counters_on_the_host() {
    let sim = SimNode::new(&example("cx6dx-dual"));
    let before = sim.read();
    let vf2 = |n: &nic::roce::NodeRoce| n.vf_counters.iter().any(|v| v.pf == "ens1f0np0" && v.vf == 2);
    assert!(vf2(&before), "{:?}", before.vf_counters);
    let roots = sim.sim.roots();
    let inv = nic::discover::discover(&roots);
    let vf = inv.pfs.iter().flat_map(|p| &p.vfs).find(|v| v.pf == inv.pfs[0].pci && v.index == 2).unwrap();
    // What exclusive netns mode does when the CNI moves the device: the namespace-tagged
    // `infiniband` class entry leaves the host.
    std::fs::remove_dir_all(roots.sys(format!("class/infiniband/{}", vf.rdma[0].name))).unwrap();
    let after = sim.read();
    assert!(!vf2(&after), "{:?}", after.vf_counters);
    assert_eq!(after.vf_counters.len() + 1, before.vf_counters.len());
}

#[test]
fn a_vf_in_a_pods_namespace_still_has_netdev_counters_through_its_pf() {
    let mut sim = SimNode::new(&example("cx6dx-dual"));
    let roots = sim.sim.roots();
    let inv = nic::discover::discover(&roots);
    let vf = inv.pfs.iter().flat_map(|p| &p.vfs).find(|v| v.pf == inv.pfs[0].pci && v.index == 2).unwrap();
    // The CNI's move in exclusive netns mode: netdev and RDMA device leave the host's sysfs.
    sim.sim.move_vf_into_pod(vf.pci).unwrap();
    let node = sim.read();
    assert!(!node.vf_counters.iter().any(|v| v.pf == "ens1f0np0" && v.vf == 2), "{:?}", node.vf_counters);
    let t = render(&node, &evaluate(&default_profile(), &node).checks);
    let s = nic::sim::sim_vf_stats(2);
    let vf2 = "{interface=\"ens1f0np0\",vf=\"2\"}";
    for line in [
        format!("kuberdma_vf_netdev_received_bytes_total{vf2} {}", s.rx_bytes),
        format!("kuberdma_vf_netdev_transmitted_bytes_total{vf2} {}", s.tx_bytes),
        format!("kuberdma_vf_netdev_received_packets_total{vf2} {}", s.rx_packets),
        format!("kuberdma_vf_netdev_transmitted_packets_total{vf2} {}", s.tx_packets),
        format!("kuberdma_vf_netdev_received_dropped_total{vf2} {}", s.rx_dropped),
        format!("kuberdma_vf_netdev_transmitted_dropped_total{vf2} {}", s.tx_dropped),
        format!("kuberdma_vf_netdev_received_multicast_total{vf2} {}", s.multicast),
        format!("kuberdma_vf_netdev_received_broadcast_total{vf2} {}", s.broadcast),
        "# TYPE kuberdma_vf_netdev_received_bytes_total counter".to_string(),
    ] {
        assert!(t.lines().any(|l| l == line), "missing `{line}` in\n{t}");
    }
    assert!(!t.contains("kuberdma_vf_port_received_bytes_total{interface=\"ens1f0np0\",vf=\"2\"}"), "{t}");
    // Every VF of both PFs, one series each per family.
    let n = t.lines().filter(|l| l.starts_with("kuberdma_vf_netdev_received_bytes_total{")).count();
    assert_eq!(n, 16);
    let help = t.lines().find(|l| l.starts_with("# HELP kuberdma_vf_netdev_received_bytes_total")).unwrap();
    assert!(help.contains("including while the VF is in a pod's namespace"), "{help}");
}

/// A child process killed (and reaped) when dropped, a failed assertion included.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `kube-rdma-operator ARGS --metrics-addr 127.0.0.1:0` with a kubeconfig naming a
/// port nothing listens on (no request is needed to serve), and returns it with the
/// address it serves on, from its log.
fn daemon(args: &[&str], dir: &std::path::Path) -> (Running, std::net::SocketAddr) {
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .unwrap();
    let log = dir.join(format!("{}.log", args[0]));
    let child = Running(
        std::process::Command::new(env!("CARGO_BIN_EXE_kube-rdma-operator"))
            .args(args)
            .args(["--metrics-addr", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kc)
            .env("RUST_LOG", "info")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let t0 = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(addr) = text
            .split("metrics_addr=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|a| a.parse().ok())
        {
            return (child, addr);
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no metrics address in the log:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn the_agent_and_the_controller_serve_the_daemons_routes_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let sim = kube_rdma_operator::fixtures::example_path("cx6dx-dual");
    let sim = sim.to_str().unwrap();
    for (args, component) in
        [(vec!["agent", "--node-name", "n1", "--sim", sim], "agent"), (vec!["controller"], "controller")]
    {
        let (child, addr) = daemon(&args, dir.path());
        let metrics = get(addr, "/metrics").await;
        assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{component}: {metrics}");
        assert!(metrics.contains("Content-Type: text/plain; version=0.0.4\r\n"), "{component}: {metrics}");
        assert!(
            metrics.contains(&format!("# TYPE kuberdma_{component}_last_success_timestamp_seconds gauge")),
            "{component}: {metrics}"
        );
        // Healthy until the allowed silence has passed (90 s, 180 s): just started.
        assert_eq!(
            get(addr, "/healthz").await.split_once("\r\n\r\n").map(|(h, b)| (h.lines().next().unwrap(), b)),
            Some(("HTTP/1.1 200 OK", "ok\n")),
            "{component}"
        );
        // Every daemon says which build it is.
        let info = format!("kuberdma_build_info{{version=\"{}\",git_commit=\"", plumbing::VERSION);
        assert!(
            metrics.lines().any(|l| l.starts_with(&info) && l.ends_with("\"} 1")),
            "{component}: {metrics}"
        );
        let live = get(addr, "/livez").await;
        assert!(
            live.starts_with("HTTP/1.1 200 OK\r\n") && live.ends_with("\r\n\r\nok\n"),
            "{component}: {live}"
        );
        // The root is not an alias of /metrics; every other path is 404 naming the routes.
        for path in ["/", "/metricsx", "/healthz/x"] {
            let r = get(addr, path).await;
            assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{component} {path}: {r}");
            assert!(r.ends_with("not found: try /metrics, /healthz, /livez\n"), "{component} {path}: {r}");
        }
        drop(child);
    }
}
