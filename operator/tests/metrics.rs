//! Prometheus text of a simulated node, and the metrics endpoint over real TCP.
use std::sync::{Arc, RwLock};

use kube_rdma_operator::agent::evaluate;
use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::fixtures::{example, with_roce, SimNode};
use kube_rdma_operator::metrics::{render, serve};
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
        "# TYPE kuberdma_rdma_hw_counter_total counter",
        "kuberdma_rdma_hw_counter_total{interface=\"ens1f0np0\",counter=\"np_cnp_sent\"} 0",
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

#[tokio::test]
async fn the_endpoint_serves_the_latest_text_over_http() {
    let shared = Arc::new(RwLock::new(text()));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(serve(l, shared.clone()));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert!(resp.contains("Content-Type: text/plain; version=0.0.4"));
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(body, shared.read().unwrap().as_str());
    task.abort();
}
