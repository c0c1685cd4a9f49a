//! Property: for random valid node descriptions, discovery of the materialised
//! tree gives back the description (`describe(discover(..)) == Sim::summary()`),
//! with no problems and nothing skipped. No extra crates: a seeded xorshift.

use nic::sim::{describe, Sim};
use nic::simdesc::{AdapterDesc, GpuDesc, Model, NodeDesc, PfDesc, RdmaNaming, SwitchDesc};
use nic::PciAddr;

/// xorshift64* (Vigna 2016): small, seedable, good enough to pick shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const MODELS: [Model; 5] =
    [Model::ConnectX6Dx, Model::ConnectX7, Model::ConnectX6DxNoSriov, Model::E810C, Model::E810Xxv];

fn random_desc(rng: &mut Rng, case: u32) -> NodeDesc {
    let mut switches = vec![];
    if rng.chance(50) {
        switches.push(SwitchDesc {
            name: "sw0".into(),
            root_port: PciAddr::new(0, 0xe0, 0, 0),
            upstream: PciAddr::new(0, 0xe1, 0, 0),
        });
    }
    let mut adapters = vec![];
    let mut pf_no = 0u32;
    let mut mlx5_no = 0u32;
    let n_adapters = 1 + rng.below(3) as u8;
    for a in 0..n_adapters {
        let model = MODELS[rng.below(MODELS.len() as u64) as usize];
        // Each adapter on its own bus (and E810 VFs may spill onto the next one).
        let bus = 0x10 + a * 0x20 + rng.below(4) as u8;
        let domain = if rng.chance(10) { 1 } else { 0 };
        let ports = 1 + rng.below(2) as u8;
        let mut pfs = vec![];
        for f in 0..ports {
            let sriov = model != Model::ConnectX6DxNoSriov;
            let total = if sriov { 4 + rng.below(20) as u32 } else { 0 };
            let vfs = if sriov { rng.below(total as u64 + 1).min(6) as u32 } else { 0 };
            let naming = if rng.chance(40) { RdmaNaming::Rocep } else { RdmaNaming::Mlx5 };
            let bdf = PciAddr::new(domain, bus, 0, f);
            let rdma = match (rng.chance(85), naming, model.is_mlx5()) {
                (false, _, _) => None,
                (true, RdmaNaming::Rocep, _) => Some(format!("rocep{}s0f{f}", bus)),
                (true, RdmaNaming::Mlx5, true) => {
                    mlx5_no += 1;
                    Some(format!("mlx5_{}", mlx5_no + 100))
                }
                (true, RdmaNaming::Mlx5, false) => Some(format!("irdma{}", 100 + pf_no)),
            };
            let mut pf: PfDesc =
                serde_yaml::from_str(&format!("{{bdf: \"{bdf}\", netdev: \"eth{pf_no}\"}}")).unwrap();
            pf.vfs = vfs;
            pf.total_vfs = sriov.then_some(total);
            pf.numa = if rng.chance(20) { None } else { Some(rng.below(2) as u32) };
            pf.speed = Some(if rng.chance(50) { 25_000 } else { 100_000 });
            pf.operstate = if rng.chance(15) { "down".into() } else { "up".into() };
            pf.mtu = [1500, 4200, 9000][rng.below(3) as usize];
            pf.rdma = rdma;
            pf.rdma_naming = naming;
            pf.vf_rdma = if rng.chance(50) { Some(rng.chance(50)) } else { None };
            if rng.chance(30) {
                pf.vf_netdev_prefix = Some(format!("vf{pf_no}x"));
            }
            for i in 0..vfs {
                if rng.chance(15) {
                    pf.vfs_without_netdev.push(i);
                } else if rng.chance(10) {
                    pf.vfs_vfio.push(i);
                }
            }
            if !switches.is_empty() && domain == 0 && rng.chance(50) {
                pf.switch = Some("sw0".into());
            }
            pfs.push(pf);
            pf_no += 1;
        }
        // All ports of one slot share the switch decision of the first.
        let sw = pfs[0].switch.clone();
        for p in &mut pfs {
            p.switch = sw.clone();
        }
        adapters.push(AdapterDesc { model, pfs });
    }
    let mut gpus = vec![];
    if rng.chance(50) {
        gpus.push(GpuDesc {
            bdf: PciAddr::new(0, 0xd0, 0, 0),
            device: None,
            numa: Some(rng.below(2) as u32),
            switch: (!switches.is_empty() && rng.chance(50)).then(|| "sw0".into()),
        });
    }
    NodeDesc {
        node: format!("random-{case}"),
        switches,
        adapters,
        gpus,
        rdma_cm: rng.chance(80),
        rdma_netns_mode: Default::default(),
        irdma_roce_ena: None,
    }
}

#[test]
fn random_descriptions_round_trip_through_discovery() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ran, mut rejected, mut vfs) = (0, 0, 0);
    for case in 0..200 {
        let desc = random_desc(&mut rng, case);
        let sim = match Sim::materialise(&desc) {
            Ok(s) => s,
            Err(e) => {
                // The generator may produce address collisions (E810 VFs spilling onto the next
                // bus); the validator must say so instead of building a broken tree.
                let msg = e.to_string();
                assert!(
                    msg.contains("duplicate PCI address") || msg.contains("past bus ff"),
                    "case {case}: {msg}\n{desc:#?}"
                );
                rejected += 1;
                continue;
            }
        };
        let inv = nic::discover(&sim.roots());
        let got = describe(&inv);
        let want = sim.summary();
        if got != want {
            let diff: Vec<String> = want
                .iter()
                .zip(&got)
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .map(|(i, (a, b))| vec![format!("line {i}"), format!("want {a}"), format!("got  {b}")])
                .unwrap_or_else(|| vec![format!("lengths {} vs {}", want.len(), got.len())]);
            panic!("case {case} differs:\n{}\n{}", diff.join("\n"), serde_yaml::to_string(&desc).unwrap());
        }
        assert!(got.iter().all(|l| !l.contains("problem ") && !l.starts_with("skipped")), "case {case}");
        vfs += inv.vfs().count();
        ran += 1;
    }
    assert!(ran >= 180, "only {ran} of 200 random descriptions were valid ({rejected} rejected)");
    assert!(vfs > 500, "the generator should exercise many VFs, got {vfs}");
}
