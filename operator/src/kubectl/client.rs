//! The Kubernetes client of every binary, configured as `kubectl` is: `--kubeconfig
//! FILE`, else `KUBECONFIG`, else `~/.kube/config`, else the pod's in-cluster
//! service account; `--context` picks a kubeconfig context; `--as` / `--as-group`
//! impersonate, `--request-timeout` bounds each request (kubectl's flags). A missing or broken
//! configuration is an error that says which source was tried and what to do,
//! never a panic (the TLS stack's crypto provider is compiled in: kube's `ring`
//! feature).
//!
//! The API server's own throttling (max-in-flight and API Priority and Fairness)
//! answers 429 with a plain-text body and a `Retry-After` header
//! (k8s.io/apiserver v0.34.4 `pkg/server/filters/priority-and-fairness.go`
//! `tooManyRequests`), which kube turns into a `Status` without the delay. The
//! [`RetryAfterLayer`] puts the header's delay into `details.retryAfterSeconds`,
//! where [`crate::api::with_backoff`] reads it.

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
    /// `--as USER`: impersonate this user (header `Impersonate-User`).
    pub impersonate: Option<String>,
    /// `--as-group GROUP`, repeatable (header `Impersonate-Group`).
    pub impersonate_groups: Vec<String>,
    /// `--request-timeout`: connect, read and write timeout of each request (none when `None`).
    pub request_timeout: Option<std::time::Duration>,
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

/// What is wrong with a kubeconfig, its path given once and unquoted: kube's
/// own message for an unreadable file quotes the path's `Debug` form in quotes
/// (`'"/x/kc"'`), and names the file that the description already names.
fn kubeconfig_detail(e: &kube::config::KubeconfigError, source_desc: &str) -> String {
    match e {
        kube::config::KubeconfigError::ReadConfig(io, path) => {
            let path = path.display().to_string();
            if source_desc.starts_with(&format!("{path} (")) {
                io.to_string()
            } else {
                format!("cannot read {path}: {io}")
            }
        }
        other => chain(other),
    }
}

/// The client configuration and a description of where it came from.
pub async fn config(opts: &ClientOpts) -> Result<(Config, String), ClientError> {
    let kc_opts = KubeConfigOptions { context: opts.context.clone(), ..Default::default() };
    let bad = |source_desc: String| {
        move |e: kube::config::KubeconfigError| ClientError::Kubeconfig {
            detail: kubeconfig_detail(&e, &source_desc),
            source_desc,
        }
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
    connect_described(opts).await.map(|c| c.client)
}

/// A client and the API server it talks to.
pub struct Connected {
    /// The client (see [`connect`]).
    pub client: Client,
    /// The API server's URL, which kubectl's connection errors name.
    pub server: http::Uri,
    /// Where the configuration came from, e.g. `/root/.kube/config (KUBECONFIG)`.
    pub source: String,
}

/// [`connect`], with the server and where its configuration came from, for messages.
pub async fn connect_described(opts: &ClientOpts) -> Result<Connected, ClientError> {
    let (mut cfg, desc) = config(opts).await?;
    // kube retries 429/503/504 itself, silently, up to 15 times over minutes: a
    // write (a heartbeat) would hang that long, unseen by health and metrics. The
    // operator's own retries ([`crate::api::with_backoff`]) are bounded, count every
    // failed attempt and honour Retry-After.
    cfg.default_retry = false;
    if let Some(user) = &opts.impersonate {
        cfg.auth_info.impersonate = Some(user.clone());
    }
    if !opts.impersonate_groups.is_empty() {
        cfg.auth_info.impersonate_groups = Some(opts.impersonate_groups.clone());
    }
    if let Some(t) = opts.request_timeout {
        cfg.connect_timeout = Some(t);
        cfg.read_timeout = Some(t);
        cfg.write_timeout = Some(t);
    }
    let server = cfg.cluster_url.clone();
    let builder = kube::client::ClientBuilder::try_from(cfg)
        .map_err(|e| ClientError::Build { source_desc: desc.clone(), detail: chain(&e) })?;
    Ok(Connected { client: builder.with_layer(&RetryAfterLayer).build(), server, source: desc })
}

/// The `Status` body to put in place of a plain-text 429 or 503 that carries a
/// `Retry-After` header in seconds; `None` for anything else (a JSON body is the
/// server's own `Status` and is kept).
pub fn retry_after_status(
    code: u16,
    retry_after: Option<&str>,
    content_type: Option<&str>,
) -> Option<serde_json::Value> {
    let (reason, message) = match code {
        429 => ("TooManyRequests", "Too many requests, please try again later."),
        503 => ("ServiceUnavailable", "The server is unavailable, please try again later."),
        _ => return None,
    };
    if content_type.is_some_and(|c| c.starts_with("application/json")) {
        return None;
    }
    let secs: u32 = retry_after?.trim().parse().ok()?;
    Some(serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "code": code, "reason": reason, "message": format!("{message} (Retry-After: {secs})"),
        "details": {"retryAfterSeconds": secs},
    }))
}

/// See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct RetryAfterLayer;

impl<S> tower::Layer<S> for RetryAfterLayer {
    type Service = RetryAfter<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryAfter(inner)
    }
}

/// The service of [`RetryAfterLayer`].
#[derive(Debug, Clone)]
pub struct RetryAfter<S>(S);

type DynResponse = http::Response<Box<kube::client::DynBody>>;

impl<S> tower::Service<http::Request<kube::client::Body>> for RetryAfter<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = DynResponse>,
    S::Future: Send + 'static,
{
    type Response = DynResponse;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<DynResponse, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let fut = self.0.call(req);
        Box::pin(async move {
            let res = fut.await?;
            let header = |h: http::header::HeaderName| res.headers().get(h).and_then(|v| v.to_str().ok());
            let Some(status) = retry_after_status(
                res.status().as_u16(),
                header(http::header::RETRY_AFTER),
                header(http::header::CONTENT_TYPE),
            ) else {
                return Ok(res);
            };
            let (mut parts, _plain_text) = res.into_parts();
            parts
                .headers
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
            parts.headers.remove(http::header::CONTENT_LENGTH);
            let body = http_body_util::BodyExt::map_err(
                http_body_util::Full::new(bytes::Bytes::from(status.to_string())),
                |never| -> tower::BoxError { match never {} },
            );
            Ok(http::Response::from_parts(parts, Box::new(body) as Box<kube::client::DynBody>))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_429_with_retry_after_becomes_a_status_with_the_delay() {
        // What priority-and-fairness.go and maxinflight.go send: http.Error text and the header.
        let s = retry_after_status(429, Some("3"), Some("text/plain; charset=utf-8")).unwrap();
        assert_eq!(s["details"]["retryAfterSeconds"], 3);
        assert_eq!(s["reason"], "TooManyRequests");
        let st: kube::core::Status = serde_json::from_value(s).unwrap();
        assert_eq!(st.code, 429);
        assert_eq!(retry_after_status(503, Some("1"), None).unwrap()["code"], 503);
        // The server's own Status is kept; no header, no delay to carry; other codes untouched.
        assert!(retry_after_status(429, Some("3"), Some("application/json")).is_none());
        assert!(retry_after_status(429, None, Some("text/plain")).is_none());
        assert!(retry_after_status(429, Some("Wed, 21 Oct 2026 07:28:00 GMT"), None).is_none());
        assert!(retry_after_status(500, Some("3"), None).is_none());
    }
}
