//! VFs other than a plain netdev: RDMA modes, VFs bound to vfio-pci (one
//! attachment each, node-wide) and DRA-prepared claims.

use serde_json::json;

use crate::common::*;

#[test]
fn rdma_auto_skips_and_required_fails_when_the_vf_has_no_rdma_device() {
    let lab = Lab::new("e810-xxv", 2, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "10.205.0.0/24");
    conf["rdma"] = json!("required");
    let msg = lab.refused("ADD", "r1", pod.path(), "net1", &conf, 103);
    assert!(msg.contains("has no RDMA device"), "{msg}");
    assert!(lab.host_links().contains(&vfname), "nothing may change on a refused ADD");
    assert!(lab.state_files().is_empty());
    conf["rdma"] = json!("auto");
    lab.add("r1", pod.path(), &conf);
    lab.del("r1", pod.path(), &conf);
}

#[test]
fn rdma_shared_mode_auto_skips_and_required_names_the_fix() {
    // ConnectX-6 Dx VFs carry an RDMA device in the sim tree.
    let lab = Lab::new("connectx-6dx", 1, "        rdma: mlx5_0\n");
    lab.set_rdma_netns_mode(true);
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "10.206.0.0/24");
    conf["rdma"] = json!("required");
    let msg = lab.refused("ADD", "m1", pod.path(), "net1", &conf, 103);
    assert!(msg.contains("ib_core netns_mode=0"), "{msg}");
    assert!(lab.host_links().contains(&vfname));
    let mut status = conf.clone();
    status["cniVersion"] = json!("1.1.0");
    lab.refused("STATUS", "", pod.path(), "", &status, 50);
    conf["rdma"] = json!("auto");
    lab.add("m1", pod.path(), &conf);
    lab.del("m1", pod.path(), &conf);
    lab.ok("STATUS", "", pod.path(), "", &conf);
}

#[test]
fn a_vf_bound_to_vfio_pci_gets_the_ipam_result_without_moving_anything() {
    // sriov-cni's "DPDK mode": no netdev to move; IPAM allocates, the result
    // reports the addresses for the application to use.
    let lab = Lab::new("e810-xxv", 2, "        vfsVfio: [0]\n");
    let (pci, name) = lab.vfs[0].clone();
    assert!(name.is_empty(), "VF 0 has no netdev");
    let pod = lab.pod(0);
    let host_before = lab.host_links();
    let conf = lab.conf("1.1.0", pci, "10.219.0.0/24");
    let res = lab.add("u1", pod.path(), &conf);
    assert_eq!(res["interfaces"][0]["name"], "net1");
    assert_eq!(res["interfaces"][0]["pciID"], pci.to_string());
    assert_eq!(res["interfaces"][0]["sandbox"], pod.path().display().to_string());
    assert_eq!(res["ips"][0]["address"], "10.219.0.2/24");
    assert!(links(pod.name()).is_empty(), "nothing moved into the pod");
    assert_eq!(lab.host_links(), host_before);
    let mut req = conf.clone();
    req["rdma"] = json!("required");
    lab.refused("ADD", "u2", pod.path(), "net2", &req, 103);
    lab.del("u1", pod.path(), &conf);
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty());
}

/// Regression (issue 22, defect 4): a VF bound to vfio-pci was given to two
/// pods (both ADDs succeeded). While the first pod's netns lives the second
/// is refused with code 7, as a netdev VF in a pod is; once that netns is
/// gone (a pod whose DEL never came) the VF can be taken again.
#[test]
fn a_vfio_vf_given_to_a_pod_whose_netns_lives_is_refused_to_another_with_code_7() {
    let lab = Lab::new("e810-xxv", 2, "        vfsVfio: [0]\n");
    let (pci, _) = lab.vfs[0];
    let (pod0, pod1) = (lab.pod(0), lab.pod(1));
    let conf = lab.conf("1.1.0", pci, "10.229.0.0/24");
    lab.add("vf1", pod0.path(), &conf);
    for (cid, pod, ifname) in [("vf2", &pod1, "net1"), ("vf1", &pod0, "net2")] {
        let (code, out) = lab.cni("ADD", cid, pod.path(), ifname, &conf);
        assert_eq!(code, 7, "{cid}/{ifname}: {out}");
        let msg = out["msg"].as_str().unwrap();
        assert!(msg.contains("already given to container vf1") && msg.contains(pod0.name()), "{msg}");
        lab.ok("DEL", cid, pod.path(), ifname, &conf);
    }
    assert_eq!(lab.ipam_allocations().len(), 1, "the refused ADDs took no lease");
    lab.del("vf1", pod0.path(), &conf);
    let (code, out) = lab.cni("ADD", "vf2", pod1.path(), "net1", &conf);
    assert_eq!(code, 0, "free again after the first DEL: {out}");
    // The pod dies without a DEL: its attachment is stale, the VF can be taken.
    let gone = pod1.path().to_path_buf();
    pod1.delete().unwrap();
    lab.add("vf3", pod0.path(), &conf);
    for (cid, netns) in [("vf2", gone.as_path()), ("vf3", pod0.path())] {
        lab.del(cid, netns, &conf);
    }
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty());
    assert!(lab.node_files().is_empty(), "{:?}", lab.node_files());
}

/// Issue 22 (audit): the rule that a vfio-pci VF serves one attachment is
/// node-wide: a network with a state dir of its own is refused the VF
/// another network gave to a pod whose netns lives (code 7, naming that
/// attachment and its network), and gets it once that one's DEL ran. Each
/// network used to look only at its own state dir's journals, and both ADDs
/// succeeded.
#[test]
fn a_vfio_vf_given_by_one_network_is_refused_to_another_network_with_its_own_state_dir() {
    let lab = Lab::new("e810-xxv", 1, "        vfsVfio: [0]\n");
    let (pci, _) = lab.vfs[0];
    let (pod0, pod1) = (lab.pod(0), lab.pod(1));
    let a = lab.conf("1.1.0", pci, "10.240.0.0/24");
    let other = tempfile::tempdir().unwrap();
    let mut b = lab.conf("1.1.0", pci, "10.241.0.0/24");
    b["name"] = json!(format!("other-{}", lab.tag));
    b["stateDir"] = json!(other.path());
    lab.add("na1", pod0.path(), &a);
    assert_eq!(lab.node_files(), [format!("vfs/{pci}.json")].into());
    let msg = lab.refused("ADD", "nb1", pod1.path(), "net1", &b, 7);
    assert!(
        msg.contains("already given to container na1") && msg.contains(a["name"].as_str().unwrap()),
        "{msg}"
    );
    lab.del("nb1", pod1.path(), &b);
    assert_eq!(
        lab.node_files(),
        [format!("vfs/{pci}.json")].into(),
        "the refused ADD's DEL leaves na1's record"
    );
    lab.del("na1", pod0.path(), &a);
    assert!(lab.node_files().is_empty(), "{:?}", lab.node_files());
    let (code, out) = lab.cni("ADD", "nb1", pod1.path(), "net1", &b);
    assert_eq!(code, 0, "free once na1's DEL ran: {out}");
    lab.del("nb1", pod1.path(), &b);
    assert!(lab.node_files().is_empty() && lab.state_files().is_empty() && lab.ipam_allocations().is_empty());
    assert!(files(other.path()).iter().all(|f| f == "ipam-versions.json"), "{:?}", files(other.path()));
}

/// DRA mode: the network names no deviceID; the DRA driver prepared a claim
/// with two VFs for the pod (`nic::prepared`, the files the driver writes), and
/// the runtime passes `K8S_POD_UID`. Each interface gets its own VF, the
/// attachment files say what the pod got (for the claim's network data), DEL
/// removes them, and a pod without a prepared claim is refused by name.
#[test]
fn dra_mode_finds_the_pods_prepared_vf_by_pod_uid_and_records_the_attachment() {
    use nic::prepared::{self, DeviceConfig, PreparedClaim, PreparedDevice};
    let lab = Lab::new("e810-xxv", 2, "");
    let pod = lab.pod(0);
    let dir = tempfile::tempdir().unwrap();
    let pod_uid = "6c9a1f2e-0000-4000-8000-000000000001";
    let dev = |request: &str, i: usize| PreparedDevice {
        request: request.into(),
        pool: "node-a".into(),
        device: format!("vf{i}"),
        pci: lab.vfs[i].0,
        pf: Some(lab.pf),
        netdev: Some(lab.vfs[i].1.clone()),
        rdma_devices: vec![],
        port_state: None,
        cdi_ids: vec![],
        config: DeviceConfig::default(),
    };
    let claim = PreparedClaim {
        version: prepared::VERSION,
        uid: "c1a1-0001".into(),
        namespace: "default".into(),
        name: "job-0-rdma-x7k2p".into(),
        pod_claim_name: Some("rdma".into()),
        pods: vec![pod_uid.into()],
        devices: vec![dev("vf", 0), dev("vf", 1)],
    };
    prepared::write_claim(dir.path(), &claim).unwrap();
    let mut conf = lab.conf("1.1.0", lab.vfs[0].0, "10.209.0.0/24");
    conf.as_object_mut().unwrap().remove("deviceID");
    conf["claim"] = json!("rdma");
    conf["request"] = json!("vf");
    conf["preparedDir"] = json!(dir.path());
    let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=job-0;K8S_POD_UID={pod_uid}");
    let with_uid = [("CNI_ARGS", args.as_str())];

    let (code, r1) = lab.cni_env("ADD", "s1", pod.path(), "net1", &conf, &with_uid);
    assert_eq!(code, 0, "{r1}");
    assert_eq!(r1["interfaces"][0]["pciID"], lab.vfs[0].0.to_string());
    let (code, r2) = lab.cni_env("ADD", "s1", pod.path(), "net2", &conf, &with_uid);
    assert_eq!(code, 0, "{r2}");
    assert_eq!(
        r2["interfaces"][0]["pciID"],
        lab.vfs[1].0.to_string(),
        "the second interface gets the other VF"
    );
    assert_eq!(links(pod.name()), ["net1".to_string(), "net2".to_string()].into());

    let listing = prepared::list(dir.path()).unwrap();
    let mut got: Vec<_> =
        listing.attachments.iter().map(|a| (a.device.as_str(), a.ifname.as_str(), a.ips.clone())).collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("vf0", "net1", vec!["10.209.0.2/24".to_string()]),
            ("vf1", "net2", vec!["10.209.0.3/24".to_string()])
        ]
    );
    let a = &listing.attachments[0];
    assert_eq!(
        (a.pod_uid.as_str(), a.container_id.as_str(), a.claim_uid.as_str()),
        (pod_uid, "s1", "c1a1-0001")
    );
    assert_eq!(a.mac.as_deref(), r1["interfaces"][0]["mac"].as_str());

    // Every VF of the claim is attached: a third interface is refused, naming them.
    let (code, out) = lab.cni_env("ADD", "s1", pod.path(), "net3", &conf, &with_uid);
    assert_eq!(code, 104, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("already attached"), "{out}");

    // DEL: the VFs come home, the attachment files go.
    for ifname in ["net1", "net2"] {
        let (code, out) = lab.cni_env("DEL", "s1", pod.path(), ifname, &conf, &with_uid);
        assert_eq!(code, 0, "{out}");
    }
    assert!(lab.host_links().contains(&lab.vfs[0].1) && lab.host_links().contains(&lab.vfs[1].1));
    assert!(prepared::list(dir.path()).unwrap().attachments.is_empty());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());

    // Another pod has nothing prepared: refused with its UID, nothing moved.
    let other = "IgnoreUnknown=1;K8S_POD_UID=0000-other";
    let (code, out) = lab.cni_env("ADD", "s2", pod.path(), "net1", &conf, &[("CNI_ARGS", other)]);
    assert_eq!(code, 104, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("0000-other"), "{out}");
    // A network that names no claim may be a device plugin network missing its deviceID: said too.
    let mut plain = conf.clone();
    for k in ["claim", "request"] {
        plain.as_object_mut().unwrap().remove(k);
    }
    let (code, out) = lab.cni_env("ADD", "s2", pod.path(), "net1", &plain, &[("CNI_ARGS", other)]);
    assert_eq!(code, 104, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("resourceName"), "{out}");
    // No deviceID and no pod UID: the configuration cannot name a VF.
    let (code, out) = lab.cni_env("ADD", "s3", pod.path(), "net1", &conf, &[("CNI_ARGS", "")]);
    assert_eq!(code, 7, "{out}");
    assert!(links(pod.name()).is_empty());
}
