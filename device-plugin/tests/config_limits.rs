//! What a config path can name besides a config: a FIFO, a device, a huge
//! file, text nested to make the YAML parser crawl. Each is refused at once
//! with an error naming the file and the problem, by the library and by the
//! binary (`discover --config`, the daemon at startup).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use kube_rdma_device_plugin::config::{read, Config, ConfigError};

/// Loads `path` on a thread and fails if that takes more than `within` (a
/// read that blocks would otherwise hang the test run).
fn load_within(path: &Path, within: Duration) -> Result<Config, ConfigError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.to_path_buf();
    std::thread::spawn(move || tx.send(Config::load(&p)));
    rx.recv_timeout(within).unwrap_or_else(|_| panic!("loading {} took over {within:?}", path.display()))
}

#[test]
fn a_fifo_as_the_config_is_refused_at_once_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let e = load_within(&fifo, Duration::from_secs(2)).unwrap_err();
    assert!(matches!(e, ConfigError::NotAFile { kind: "a FIFO", .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&fifo.display().to_string()) && msg.contains("not a regular file (a FIFO)"),
        "{msg}"
    );
}

#[test]
fn dev_zero_as_the_config_is_refused_at_once() {
    let e = load_within(Path::new("/dev/zero"), Duration::from_secs(2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/dev/zero: not a regular file (a character device); the config must be a file"
    );
}

#[test]
fn a_config_over_4_mib_is_refused_and_one_just_under_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.yaml");
    // A valid config padded with a comment up to the limit.
    let head = "pools: [{name: a, selectors: {vendors: [\"15b3\"]}}]\n#";
    let mut text = String::from(head);
    text.push_str(&"x".repeat(read::MAX_BYTES as usize - head.len() - 1));
    text.push('\n');
    assert_eq!(text.len() as u64, read::MAX_BYTES);
    std::fs::write(&p, &text).unwrap();
    let t0 = Instant::now();
    assert_eq!(load_within(&p, Duration::from_secs(20)).unwrap().pools[0].name, "a");
    let took = t0.elapsed();
    text.push('x');
    std::fs::write(&p, &text).unwrap();
    let e = load_within(&p, Duration::from_secs(2)).unwrap_err();
    assert!(matches!(e, ConfigError::TooLarge { .. }), "{e}");
    assert_eq!(e.to_string(), format!("{}: larger than 4194304 bytes; a config is a few KiB", p.display()));
    eprintln!("a 4 MiB config parsed in {took:?}");
}

#[test]
fn eighty_thousand_levels_of_nesting_are_refused_in_well_under_a_second() {
    let n = 80_000;
    let cases = [
        ("flow sequences", format!("pools: {}{}", "[".repeat(n), "]".repeat(n))),
        ("flow mappings", format!("pools: {}1{}", "{a: ".repeat(n), "}".repeat(n))),
        ("JSON", format!("{{\"pools\": {}{}}}", "[".repeat(n), "]".repeat(n))),
        ("compact block sequences", format!("pools:\n{}x\n", "- ".repeat(n))),
    ];
    for (what, text) in cases {
        let t0 = Instant::now();
        let e = Config::parse(&text, Path::new("deep.yaml")).unwrap_err();
        let took = t0.elapsed();
        assert!(matches!(e, ConfigError::TooDeep { max: read::MAX_DEPTH, .. }), "{what}: {e}");
        assert!(e.to_string().starts_with("deep.yaml: line "), "{what}: {e}");
        assert!(e.to_string().ends_with("nested deeper than 64 levels"), "{what}: {e}");
        assert!(took < Duration::from_millis(250), "{what}: refused after {took:?}");
    }
    // Block mappings: each level one more space of indentation.
    let block: String = (0..200).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
    let e = Config::parse(&block, Path::new("deep.yaml")).unwrap_err();
    assert_eq!(e.to_string(), "deep.yaml: line 65 column 65: nested deeper than 64 levels");
}

#[test]
fn an_alias_bomb_is_refused_quickly() {
    // Each level refers to the previous one ten times: 10^9 strings if expanded.
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = format!("*a{}", i - 1);
        text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![p; 10].join(", ")));
    }
    text.push_str("pools: [{name: a, selectors: {vendors: [\"15b3\"]}, extra: *a9}]\n");
    let t0 = Instant::now();
    let e = Config::parse(&text, Path::new("bomb.yaml")).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?}", t0.elapsed());
    assert!(e.to_string().starts_with("bomb.yaml: "), "{e}");
}

#[tokio::test]
async fn the_binary_refuses_a_fifo_config_at_once_in_discover_and_daemon_mode() {
    let dirs = common::Dirs::new();
    let fifo = dirs.tmp.path().join("config.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let sim = common::examples().join("cx6dx-dual.yaml");
    for discover in [true, false] {
        let mut c = dirs.daemon_command();
        if discover {
            c.arg("discover");
        }
        c.arg("--sim").arg(&sim).arg("--config").arg(&fifo);
        let out = tokio::time::timeout(Duration::from_secs(10), c.output())
            .await
            .unwrap_or_else(|_| panic!("discover={discover}: the binary hung on a FIFO config"))
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "discover={discover}: {err}");
        assert!(err.contains(&format!("{}: not a regular file (a FIFO)", fifo.display())), "{err}");
    }
}
