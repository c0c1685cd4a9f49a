//! The real-API-server fixture itself: what other crates' tests rely on
//! (an admin kubeconfig, ServiceAccount tokens, restart, compaction).

use kube_rdma_e2e::daemon::run;
use kube_rdma_e2e::ApiServer;

#[test]
fn a_private_api_server_serves_admins_service_accounts_and_survives_a_restart() {
    // Without the watch cache, reads at an old resourceVersion go to etcd, where a
    // compaction makes them 410 (with the cache, old enough ones fall out of its window).
    let opts = kube_rdma_e2e::apiserver::Options { extra_args: vec!["--watch-cache=false".into()], ..Default::default() };
    let mut api = ApiServer::start_with(opts).expect("etcd + kube-apiserver start");
    let ns = run(api.kubectl().args(["get", "ns", "default", "-o", "name"])).unwrap();
    assert_eq!(ns.trim(), "namespace/default");

    // A ServiceAccount token is a real bound token: RBAC applies to it.
    run(api.kubectl().args(["-n", "default", "create", "serviceaccount", "probe"])).unwrap();
    let token = api.service_account_token("default", "probe", None).unwrap();
    let kc = api.token_kubeconfig("probe", &token).unwrap();
    let who = run(kube_rdma_e2e::apiserver::kubectl(&kc).args(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]))
        .unwrap();
    assert_eq!(who, "system:serviceaccount:default:probe");
    let denied = kube_rdma_e2e::apiserver::kubectl(&kc).args(["get", "nodes"]).output().unwrap();
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("forbidden"), "{}", String::from_utf8_lossy(&denied.stderr));

    // Data survives a restart of kube-apiserver (etcd keeps it).
    api.restart().unwrap();
    run(api.kubectl().args(["-n", "default", "get", "serviceaccount", "probe"])).unwrap();

    // After compaction, a list from an old resourceVersion is 410 Gone.
    let rv = run(api.kubectl().args(["get", "--raw", "/api/v1/namespaces/default/serviceaccounts"])).unwrap();
    let rv: serde_json::Value = serde_json::from_str(&rv).unwrap();
    let old = rv["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    for i in 0..3 {
        run(api.kubectl().args(["-n", "default", "create", "configmap", &format!("c{i}")])).unwrap();
    }
    api.compact().unwrap();
    let gone = api
        .kubectl()
        .args(["get", "--raw", &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={old}&timeoutSeconds=1")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&gone.stdout).to_string() + &String::from_utf8_lossy(&gone.stderr);
    assert!(text.contains("410") || text.contains("too old"), "{text}");
}
