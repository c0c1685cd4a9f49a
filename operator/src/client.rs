//! The Kubernetes client of every binary, configured as `kubectl` is: `--kubeconfig
//! FILE`, else `KUBECONFIG`, else `~/.kube/config`, else the pod's in-cluster
//! service account; `--context` picks a kubeconfig context. A missing or broken
//! configuration is an error that says which source was tried and what to do,
//! never a panic (the TLS stack's crypto provider is compiled in: kube's `ring`
//! feature).

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::api::chain;

/// Where the client configuration comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOpts {
    /// `--kubeconfig FILE`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context NAME`.
    pub context: Option<String>,
}

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A kubeconfig was named or found but cannot be used.
    #[error("kubeconfig {source_desc}: {detail}")]
    Kubeconfig {
        /// The file(s) and how they were chosen.
        source_desc: String,
        /// What is wrong.
        detail: String,
    },
    /// Running in a pod, but its service account configuration is unusable.
    #[error("in-cluster configuration (service account of this pod): {0}")]
    InCluster(String),
    /// Nothing to connect with.
    #[error(
        "no Kubernetes configuration: give --kubeconfig FILE or set KUBECONFIG (no {home} either), \
         or run in a pod (KUBERNETES_SERVICE_HOST is not set)"
    )]
    Missing {
        /// The default kubeconfig path looked at.
        home: String,
    },
    /// `--context` without any kubeconfig.
    #[error("--context {0} needs a kubeconfig: give --kubeconfig FILE or set KUBECONFIG")]
    ContextWithoutKubeconfig(String),
    /// The configuration loaded, but a client could not be built from it (bad
    /// certificate or key data, unsupported auth).
    #[error("{source_desc}: cannot build a client: {detail}")]
    Build {
        /// Where the configuration came from.
        source_desc: String,
        /// What is wrong.
        detail: String,
    },
}

fn default_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(".kube/config"))
}

/// The client configuration and a description of where it came from.
pub async fn config(opts: &ClientOpts) -> Result<(Config, String), ClientError> {
    let kc_opts = KubeConfigOptions { context: opts.context.clone(), ..Default::default() };
    let bad = |source_desc: String| {
        move |e: kube::config::KubeconfigError| ClientError::Kubeconfig { source_desc, detail: chain(&e) }
    };
    if let Some(path) = &opts.kubeconfig {
        let desc = format!("{} (--kubeconfig)", path.display());
        let kc = Kubeconfig::read_from(path).map_err(bad(desc.clone()))?;
        let cfg = Config::from_custom_kubeconfig(kc, &kc_opts).await.map_err(bad(desc.clone()))?;
        return Ok((cfg, desc));
    }
    let env = std::env::var("KUBECONFIG").ok().filter(|v| !v.is_empty());
    let home = default_kubeconfig();
    let desc = match (&env, &home) {
        (Some(v), _) => Some(format!("{v} (KUBECONFIG)")),
        (None, Some(h)) if h.exists() => Some(h.display().to_string()),
        _ => None,
    };
    if let Some(desc) = desc {
        let cfg = Config::from_kubeconfig(&kc_opts).await.map_err(bad(desc.clone()))?;
        return Ok((cfg, desc));
    }
    if let Some(ctx) = &opts.context {
        return Err(ClientError::ContextWithoutKubeconfig(ctx.clone()));
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        let cfg = Config::incluster().map_err(|e| ClientError::InCluster(chain(&e)))?;
        return Ok((cfg, "in-cluster configuration".into()));
    }
    Err(ClientError::Missing {
        home: home.map(|h| h.display().to_string()).unwrap_or_else(|| "~/.kube/config ($HOME unset)".into()),
    })
}

/// A client configured from `opts` (see the module docs). Makes no request.
pub async fn connect(opts: &ClientOpts) -> Result<Client, ClientError> {
    connect_described(opts).await.map(|(c, _)| c)
}

/// [`connect`], and `API server <url> (from <source>)` for error messages.
pub async fn connect_described(opts: &ClientOpts) -> Result<(Client, String), ClientError> {
    let (mut cfg, desc) = config(opts).await?;
    // kube retries 429/503/504 itself, silently, up to 15 times over minutes: a
    // write (a heartbeat) would hang that long, unseen by health and metrics. The
    // operator's own retries ([`crate::api::with_backoff`]) are bounded, count every
    // failed attempt and honour Retry-After.
    cfg.default_retry = false;
    let about = format!("API server {} (from {desc})", cfg.cluster_url);
    let client =
        Client::try_from(cfg).map_err(|e| ClientError::Build { source_desc: desc, detail: chain(&e) })?;
    Ok((client, about))
}
