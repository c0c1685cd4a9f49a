//! A fleet of simulated nodes' agents against a real API server (etcd and
//! kube-apiserver v1.34.4 from the Go module proxy, `kube_rdma_e2e::ApiServer`):
//! idle API traffic of today's polling against the watch-driven agents (the same
//! code as `kube-rdma-operator agent`, in-process, one kube client each), and the
//! controller's time to converge after a profile change. Requests are counted by
//! kube-apiserver itself (`apiserver_request_total`, `apiserver_longrunning_requests`).
//!
//! Run: `cargo bench -p kube-rdma-operator --bench fleet` (about 6 minutes).
//! Env: `FLEET_NODES` (default 300: what two cores hold with kube-apiserver and
//! etcd on them), `FLEET_SCALE` (default 10: the heartbeat and the watch timeout,
//! 600 s each, run 10x faster and the measured rates are divided by 10; today's
//! polling runs at its real 30 s).
//!
//! Targets (issue 10): at most 1 request per node per 10 minutes beyond open
//! watches; the controller converges within 2 s of a profile change.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use kube_rdma_e2e::ApiServer;
use kube_rdma_operator::agent::{heartbeat_jitter, Agent, AgentConfig, HEARTBEAT};
use kube_rdma_operator::controller::Controller;
use kube_rdma_operator::crd::{RdmaNodeState, RoceProfile};
use kube_rdma_operator::fixtures::SimNode;
use kube_rdma_operator::kubectl::client::{connect, ClientOpts};
use kube_rdma_operator::profiles::select_profile;
use kube_rdma_operator::publish::Publisher;
use kube_rdma_operator::source::NodeSource;
use kube_rdma_operator::status::{evaluate, now_rfc3339};
use serde_json::json;
use tokio::sync::watch;

/// Today's agent loop, kept as the baseline: every 30 s it GETs its Node and LISTs
/// the RoceProfiles, reads and checks the node, and writes what changed.
const OLD_POLL: Duration = Duration::from_secs(30);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn node_name(i: usize) -> String {
    format!("node-{i:04}")
}

fn source_for(sim: &SimNode, node: &str) -> NodeSource {
    let mut s = sim.source.clone();
    s.opts.node_name = Some(node.to_string());
    s
}

async fn old_agent(client: kube::Client, node: String, src: NodeSource, mut stop: watch::Receiver<bool>) {
    let mut publisher = Publisher::new(client.clone(), node.clone(), Default::default());
    let nodes: Api<Node> = Api::all(client.clone());
    let profiles: Api<RoceProfile> = Api::all(client);
    loop {
        let pass = async {
            let n = nodes.get(&node).await?;
            let list = profiles.list(&ListParams::default()).await?;
            let profile = select_profile(&list.items, n.labels());
            let src = src.clone();
            let observed = tokio::task::spawn_blocking(move || src.read()).await.expect("read");
            let status = evaluate(&profile, &observed);
            publisher.publish(status, &now_rfc3339()).await.map_err(|e| e.source)?;
            Ok::<_, kube::Error>(())
        };
        if let Err(e) = pass.await {
            eprintln!("baseline {node}: {e}");
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(OLD_POLL) => {}
        }
    }
}

struct Window {
    secs: f64,
    /// Requests other than WATCH.
    requests: f64,
    /// Of those, server-side applies of an RdmaNodeState's status (heartbeats, at idle).
    status_applies: f64,
    /// WATCH requests (counted by kube-apiserver when a watch ends: a timed-out
    /// watch that the client re-opens is one).
    watches: f64,
}

/// What kube-apiserver has counted so far: requests to our resources by verb
/// and resource (`apiserver_request_total`, keyed `VERB resource[/subresource]`),
/// and the watches open now.
#[derive(Default)]
struct Counts {
    by_request: BTreeMap<String, f64>,
    open_watches: f64,
}

const STATUS_APPLY: &str = "APPLY rdmanodestates/status";

fn counts(api: &ApiServer) -> Counts {
    let o = api.kubectl().args(["get", "--raw", "/metrics"]).output().expect("kubectl get --raw /metrics");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut c = Counts::default();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let v: f64 = value.parse().unwrap_or(0.0);
        let label = |k: &str| {
            series
                .split(&format!("{k}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let ours =
            ["nodes", "rdmanodestates", "roceprofiles", "events"].contains(&label("resource").as_str());
        if series.starts_with("apiserver_request_total{") && ours {
            let sub = label("subresource");
            let key = format!(
                "{} {}{}{sub}",
                label("verb"),
                label("resource"),
                if sub.is_empty() { "" } else { "/" }
            );
            *c.by_request.entry(key).or_insert(0.0) += v;
        } else if series.starts_with("apiserver_longrunning_requests{") && label("verb") == "WATCH" && ours {
            c.open_watches += v;
        }
    }
    c
}

fn window(before: &Counts, after: &Counts, secs: f64) -> Window {
    let d = |key: &str| {
        after.by_request.get(key).copied().unwrap_or(0.0) - before.by_request.get(key).copied().unwrap_or(0.0)
    };
    let keys: std::collections::BTreeSet<&String> =
        after.by_request.keys().chain(before.by_request.keys()).collect();
    let (watch, other): (Vec<&String>, Vec<&String>) =
        keys.into_iter().partition(|k| k.starts_with("WATCH "));
    Window {
        secs,
        requests: other.iter().map(|k| d(k)).sum(),
        status_applies: d(STATUS_APPLY),
        watches: watch.iter().map(|k| d(k)).sum(),
    }
}

/// Each agent's watches (its Node, its RdmaNodeState, the RoceProfiles), each
/// re-opened when the server ends it after the agent's watch timeout.
const AGENT_WATCHES: f64 = 3.0;

/// The idle rates per node per 10 minutes at the real heartbeat and watch timeout,
/// computed from the agents' schedule: every agent writes once per heartbeat
/// interval (its own, [`heartbeat_jitter`]: 10 min + 0..10 %), and each of its
/// [`AGENT_WATCHES`] is re-opened once per watch timeout. Returns (heartbeats,
/// watch re-opens, mean heartbeat interval).
fn idle_schedule(n: usize, heartbeat: Duration, watch_timeout: Duration) -> (f64, f64, Duration) {
    let intervals: Vec<f64> =
        (0..n).map(|i| (heartbeat + heartbeat_jitter(&node_name(i), heartbeat)).as_secs_f64()).collect();
    let heartbeats = intervals.iter().map(|t| 600.0 / t).sum::<f64>() / n as f64;
    let mean = Duration::from_secs_f64(intervals.iter().sum::<f64>() / n as f64);
    (heartbeats, AGENT_WATCHES * 600.0 / watch_timeout.as_secs_f64(), mean)
}

/// Polls (every 500 ms) until `f` holds for the list of node states. Not
/// re-checked at every write: listing the fleet's states after each of thousands
/// of writes would make the measurement the bottleneck.
fn poll_states(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    what: &str,
    f: impl Fn(&[RdmaNodeState]) -> bool,
) -> Duration {
    let t0 = Instant::now();
    let api: Api<RdmaNodeState> = Api::all(client.clone());
    loop {
        let items = rt.block_on(api.list(&ListParams::default())).map(|l| l.items).unwrap_or_default();
        if f(&items) {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < Duration::from_secs(900), "{what}: not within 900 s");
        std::thread::sleep(Duration::from_millis(500));
    }
}

struct Fleet {
    n: usize,
    api: ApiServer,
    admin: kube::Client,
    sim: SimNode,
    opts: ClientOpts,
    rt: tokio::runtime::Runtime,
}

impl Fleet {
    fn new(n: usize) -> Self {
        let api = ApiServer::start().unwrap_or_else(|e| panic!("control plane: {e:#}"));
        let opts = ClientOpts { kubeconfig: Some(api.kubeconfig()), ..Default::default() };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let admin = rt.block_on(connect(&opts)).unwrap();
        rt.block_on(async {
            kube_rdma_operator::crd_apply::apply(admin.clone()).await.unwrap();
            // Served once established.
            let profiles: Api<RoceProfile> = Api::all(admin.clone());
            while profiles.list(&ListParams::default().limit(1)).await.is_err() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let nodes: Api<Node> = Api::all(admin.clone());
            futures::stream::iter(0..n)
                .map(|i| {
                    let nodes = nodes.clone();
                    async move {
                        let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": node_name(i), "labels": {"fleet": "yes"}}}))
                        .unwrap();
                        nodes.create(&PostParams::default(), &node).await.unwrap();
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<()>>()
                .await;
            let spec = json!({"nodeSelector": {"fleet": "yes"}, "trust": "dscp", "pfc": {"priorities": [3]},
                "dscpToPriority": [{"dscp": 26, "priority": 3}, {"dscp": 48, "priority": 6}], "ecn": {"priorities": [3]}});
            let p: RoceProfile = serde_json::from_value(json!({"apiVersion": "kuberdma.io/v1alpha1",
                "kind": "RoceProfile", "metadata": {"name": "fleet"}, "spec": spec}))
            .unwrap();
            profiles.create(&PostParams::default(), &p).await.unwrap();
        });
        let sim = SimNode::new(&kube_rdma_operator::fixtures::example("cx6dx-dual"));
        Self { n, api, admin, sim, opts, rt }
    }

    /// Today's polling: requests/s at idle over two poll periods.
    fn baseline(&self) -> f64 {
        let n = self.n;
        let (stop_tx, stop_rx) = watch::channel(false);
        self.rt.block_on(async {
            for i in 0..n {
                let client = connect(&self.opts).await.unwrap();
                let src = source_for(&self.sim, &node_name(i));
                tokio::spawn(old_agent(client, node_name(i), src, stop_rx.clone()));
            }
        });
        let t = poll_states(&self.rt, &self.admin, "baseline start", |states| {
            states.len() == n
                && states.iter().all(|o| o.status.as_ref().is_some_and(|s| !s.fingerprint.is_empty()))
        });
        println!("  baseline: all {n} states published {:.1} s after start", t.as_secs_f64());
        // The pollers started together: two full poll periods after the start-up writes.
        std::thread::sleep(Duration::from_secs(5));
        let before = counts(&self.api);
        std::thread::sleep(2 * OLD_POLL);
        let base = window(&before, &counts(&self.api), (2 * OLD_POLL).as_secs_f64());
        stop_tx.send(true).unwrap();
        std::thread::sleep(Duration::from_secs(1));
        let rate = base.requests / base.secs;
        println!(
            "  today's polling (GET node + LIST roceprofiles every 30 s): {rate:.1} requests/s at idle ({} requests in {:.0} s)",
            base.requests, base.secs
        );
        rate
    }

    /// The agents (and the controller) of this build, until `stop`.
    fn start_watching(&self, heartbeat: Duration, watch_timeout: Duration, stop: &watch::Receiver<bool>) {
        let n = self.n;
        let t0 = Instant::now();
        let started_at = now_rfc3339();
        self.rt.block_on(async {
            let ctl_client = connect(&self.opts).await.unwrap();
            let mut s = stop.clone();
            tokio::spawn(Controller::new(ctl_client).run(async move {
                let _ = s.changed().await;
            }));
            for i in 0..n {
                let client = connect(&self.opts).await.unwrap();
                let mut cfg = AgentConfig::new(node_name(i), source_for(&self.sim, &node_name(i)));
                cfg.heartbeat = heartbeat;
                cfg.watch_timeout = watch_timeout;
                let mut s = stop.clone();
                tokio::spawn(Agent::new(cfg, client).run(None, async move {
                    let _ = s.changed().await;
                }));
            }
        });
        // Running when every agent has written its state once (after listing its watches).
        poll_states(&self.rt, &self.admin, "every agent publishes", |states| {
            let fresh = states.iter().filter(|o| {
                o.status
                    .as_ref()
                    .and_then(|s| s.last_heartbeat_time.as_deref())
                    .is_some_and(|t| t >= started_at.as_str())
            });
            fresh.count() == n
        });
        println!(
            "  watches: {n} agents and the controller running {:.1} s after start, {} watches open (kube-apiserver)",
            t0.elapsed().as_secs_f64(),
            counts(&self.api).open_watches
        );
        std::thread::sleep(Duration::from_secs(3));
    }

    /// Idle traffic of this build: counted by kube-apiserver over a window of
    /// 2.2 heartbeats (and at least two watch timeouts), reported per heartbeat,
    /// and per node per 10 min at the real heartbeat and watch timeout.
    ///
    /// The agents started together, so their heartbeats (and watch re-opens) come in
    /// waves: a window holds a whole number of them per node, and its count divided
    /// by its length depends on where the window falls (2 heartbeats in 2.2 periods:
    /// 0.91 per period). The rate is therefore the agents' schedule (one write per
    /// heartbeat interval, mean 10.5 min; each watch re-opened once per timeout)
    /// times what the window measures independently of its length: the requests sent
    /// per heartbeat, and whether anything else was sent.
    fn idle(&self, scale: u32, heartbeat: Duration, watch_timeout: Duration, base_rate: f64) {
        let n = self.n as f64;
        let span = heartbeat.mul_f64(2.2).max(watch_timeout * 2);
        let before = counts(&self.api);
        std::thread::sleep(span);
        let idle = window(&before, &counts(&self.api), span.as_secs_f64());
        let s = f64::from(scale);
        let (hb_per_10min, reopens_per_10min, mean_interval) =
            idle_schedule(self.n, heartbeat * scale, watch_timeout * scale);
        let per_heartbeat = idle.requests / idle.status_applies.max(1.0);
        let per_node_10min = per_heartbeat * hb_per_10min;
        println!(
            "  this build (watches; heartbeat {} s + 0..10 % per agent, watch timeout {} s, both at time scale {scale}): \
             kube-apiserver counted {} requests beyond watches ({} of them status applies: heartbeats) \
             and {} watch re-opens in {:.0} s",
            heartbeat.as_secs_f64(),
            watch_timeout.as_secs_f64(),
            idle.requests,
            idle.status_applies,
            idle.watches,
            idle.secs
        );
        println!(
            "    per heartbeat: {per_heartbeat:.2} requests ({} beyond the heartbeats themselves)",
            idle.requests - idle.status_applies
        );
        println!(
            "    per node per 10 min (heartbeat 10 min, mean interval {:.2} min; watch timeout {} min): \
             {per_node_10min:.2} requests beyond open watches (budget 1: {}); \
             {reopens_per_10min:.2} watch re-opens ({AGENT_WATCHES} watches); \
             {:.2} requests counting watch re-opens (from the agents' schedule x the requests per heartbeat above)",
            mean_interval.as_secs_f64() / 60.0,
            (watch_timeout * scale).as_secs() / 60,
            if per_node_10min <= 1.0 { "OK" } else { "OVER" },
            per_node_10min + reopens_per_10min
        );
        println!(
            "    (counted in this window instead: {:.2} requests and {:.2} watch re-opens per node per 10 min; \
             the agents' waves make that depend on the window's length, see the source)",
            idle.requests / idle.secs / s * 600.0 / n,
            idle.watches / idle.secs / s * 600.0 / n
        );
        if base_rate.is_finite() {
            let rate = per_node_10min * n / 600.0;
            println!(
                "    ratio to today's polling: {:.0}x fewer requests; {:.0}x counting watch re-opens",
                base_rate / rate.max(f64::MIN_POSITIVE),
                base_rate / ((per_node_10min + reopens_per_10min) * n / 600.0).max(f64::MIN_POSITIVE)
            );
        }
    }

    /// A profile change that makes every node drift (PFC wanted on 4): until the
    /// agents' states show it, and until the controller's profile status does.
    fn converge(&self) {
        let n = self.n;
        let t0 = Instant::now();
        let profiles: Api<RoceProfile> = Api::all(self.admin.clone());
        let patch = json!({"spec": {"pfc": {"priorities": [4]}}});
        self.rt.block_on(profiles.patch("fleet", &PatchParams::default(), &Patch::Merge(&patch))).unwrap();
        let states: Api<RdmaNodeState> = Api::all(self.admin.clone());
        let (mut t_agents, mut t_converged) = (None, None);
        let mut last_list = Instant::now() - Duration::from_secs(1);
        while t0.elapsed() < Duration::from_secs(120) && (t_agents.is_none() || t_converged.is_none()) {
            if t_converged.is_none() {
                let p = self.rt.block_on(profiles.get_opt("fleet")).ok().flatten();
                if p.and_then(|p| p.status)
                    .is_some_and(|s| s.nodes_drifted as usize == n && s.nodes_matched as usize == n)
                {
                    t_converged = Some(t0.elapsed());
                }
            }
            if t_agents.is_none() && last_list.elapsed() >= Duration::from_millis(500) {
                last_list = Instant::now();
                let items = self
                    .rt
                    .block_on(states.list(&ListParams::default()))
                    .map(|l| l.items)
                    .unwrap_or_default();
                let drifted = items
                    .iter()
                    .filter(|o| o.status.as_ref().is_some_and(|s| s.summary.ready == "False"))
                    .count();
                if drifted == n {
                    t_agents = Some(t0.elapsed());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let secs = |t: Option<Duration>| {
            t.map_or("not within 120 s".to_string(), |t| format!("{:.2} s", t.as_secs_f64()))
        };
        println!(
            "  controller converged {} after the profile change: {n} of {n} nodes drifted in its status (target < 2 s: {})",
            secs(t_converged),
            if t_converged.is_some_and(|t| t < Duration::from_secs(2)) { "OK" } else { "OVER TARGET" }
        );
        println!(
            "    every agent's state showed the drift after {} (polled every 500 ms); \
             today: up to 30 s agent poll + 30 s controller interval",
            secs(t_agents),
        );
        if t_converged.is_none() {
            let p = self.rt.block_on(profiles.get_opt("fleet")).ok().flatten();
            println!("    profile status: {:?}", p.and_then(|p| p.status));
        }
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLEET_LOG").unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let n = env_u64("FLEET_NODES", 300) as usize;
    let scale = env_u64("FLEET_SCALE", 10).max(1) as u32;
    let heartbeat = HEARTBEAT / scale;
    let watch_timeout = Duration::from_secs(600) / scale;
    // `FLEET_ONLY=converge`: skip the idle measurements (to profile the convergence).
    let only_converge = std::env::var("FLEET_ONLY").is_ok_and(|v| v == "converge");

    let fleet = Fleet::new(n);
    println!(
        "fleet: {n} simulated nodes (cx6dx-dual), each agent with its own kube client, kube-apiserver {} ({})",
        kube_rdma_e2e::peers::K8S_VERSION,
        fleet.api.url
    );
    let base_rate = if only_converge { f64::NAN } else { fleet.baseline() };
    let (stop_tx, stop_rx) = watch::channel(false);
    fleet.start_watching(heartbeat, watch_timeout, &stop_rx);
    if !only_converge {
        fleet.idle(scale, heartbeat, watch_timeout, base_rate);
    }
    fleet.converge();
    stop_tx.send(true).unwrap();
    std::thread::sleep(Duration::from_millis(500));
}
