//! A tiny test runner for the VM: each test runs on its own thread with a deadline, a panic or an
//! error is a FAIL, and every result is one line `LAB <name> PASS|FAIL <detail>` on stdout.

use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What every in-VM test gets: the objects `/init` set up (see `lab/init`).
#[derive(Debug, Clone)]
pub struct Lab {
    /// netdevsim PF netdev (e.g. `eth1`), with `vfs` VFs.
    pub pf: String,
    /// netdevsim device name on the netdevsim bus (e.g. `netdevsim10`).
    pub nsim_dev: String,
    /// Number of VFs `/init` enabled on the PF.
    pub vfs: u32,
    /// Soft-RoCE device name (e.g. `rxe0`).
    pub rxe: String,
    /// The netdev rxe runs over (a veth end).
    pub rxe_netdev: String,
    /// Path of the real `kube-rdma-cni` executable.
    pub cni: String,
}

impl Lab {
    /// Reads the description `/init` exported.
    pub fn from_env() -> anyhow::Result<Lab> {
        let var = |k: &str| std::env::var(k).map_err(|_| anyhow::anyhow!("{k} not set (run under lab/init)"));
        Ok(Lab {
            pf: var("LAB_PF")?,
            nsim_dev: var("LAB_NSIM_DEV")?,
            vfs: var("LAB_NSIM_VFS")?.parse()?,
            rxe: var("LAB_RXE")?,
            rxe_netdev: var("LAB_RXE_NETDEV")?,
            cni: var("LAB_CNI")?,
        })
    }
}

/// A test: a name and a body returning a short detail for the PASS line.
pub struct Test {
    /// Unique, stable name (used by `LAB_FILTER`).
    pub name: &'static str,
    /// The body.
    pub run: fn(&Lab) -> anyhow::Result<String>,
}

/// Runs the tests in order, prints one line each, returns (passed, failed).
pub fn run_all(lab: &Lab, tests: &[Test], filter: &str, deadline: Duration) -> (usize, usize) {
    let (mut pass, mut fail) = (0, 0);
    for t in tests.iter().filter(|t| filter.is_empty() || t.name.contains(filter)) {
        let started = Instant::now();
        let (tx, rx) = mpsc::channel();
        let lab2 = lab.clone();
        let body = t.run;
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(move || body(&lab2));
            let _ = tx.send(r);
        });
        let outcome = match rx.recv_timeout(deadline) {
            Ok(Ok(Ok(detail))) => Ok(detail),
            Ok(Ok(Err(e))) => Err(format!("{e:#}")),
            Ok(Err(p)) => Err(format!(
                "panic: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
            Err(_) => Err(format!("timed out after {deadline:?}")),
        };
        let ms = started.elapsed().as_millis();
        match outcome {
            Ok(d) => {
                pass += 1;
                crate::say(&format!("LAB {} PASS {} ({ms} ms)\n", t.name, one_line(&d)));
            }
            Err(e) => {
                fail += 1;
                crate::say(&format!("LAB {} FAIL {} ({ms} ms)\n", t.name, one_line(&e)));
            }
        }
    }
    (pass, fail)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Fails with a message naming what differed.
#[macro_export]
macro_rules! check_eq {
    ($what:expr, $got:expr, $want:expr) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            anyhow::bail!("{}: got {:?}, want {:?}", $what, got, want);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Lab {
        Lab {
            pf: "eth1".into(),
            nsim_dev: "netdevsim10".into(),
            vfs: 4,
            rxe: "rxe0".into(),
            rxe_netdev: "lrxe0".into(),
            cni: "/bin/false".into(),
        }
    }

    fn ok(_: &Lab) -> anyhow::Result<String> {
        Ok("fine".into())
    }
    fn err(_: &Lab) -> anyhow::Result<String> {
        anyhow::bail!("broken\non two lines")
    }
    fn panics(_: &Lab) -> anyhow::Result<String> {
        panic!("boom")
    }
    fn hangs(_: &Lab) -> anyhow::Result<String> {
        std::thread::sleep(Duration::from_secs(5));
        Ok("late".into())
    }
    fn mismatch(_: &Lab) -> anyhow::Result<String> {
        check_eq!("answer", 41, 42);
        Ok("unreachable".into())
    }

    #[test]
    fn errors_panics_and_timeouts_all_count_as_failures() {
        let tests = [
            Test { name: "ok", run: ok },
            Test { name: "err", run: err },
            Test { name: "panics", run: panics },
            Test { name: "hangs", run: hangs },
            Test { name: "mismatch", run: mismatch },
        ];
        assert_eq!(run_all(&lab(), &tests, "", Duration::from_millis(300)), (1, 4));
    }

    #[test]
    fn the_filter_selects_by_substring() {
        let tests = [Test { name: "vf-one", run: ok }, Test { name: "nldev-two", run: err }];
        assert_eq!(run_all(&lab(), &tests, "vf-", Duration::from_secs(1)), (1, 0));
        assert_eq!(run_all(&lab(), &tests, "nothing", Duration::from_secs(1)), (0, 0));
    }

    #[test]
    fn details_are_one_line() {
        assert_eq!(one_line("a\n  b\tc "), "a b c");
    }

    #[test]
    fn from_env_names_the_missing_variable() {
        // The test process is not started by lab/init, so LAB_PF is absent.
        let e = Lab::from_env().unwrap_err().to_string();
        assert!(e.contains("LAB_") && e.contains("lab/init"), "{e}");
    }
}
