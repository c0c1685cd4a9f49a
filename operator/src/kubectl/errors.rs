//! Errors as kubectl words them (k8s.io/kubectl v0.34.4 `pkg/cmd/util/helpers.go`:
//! `CheckErr`, `StandardErrorMessage`, `UsageErrorf`; the usage line of
//! `pkg/util/templates/templater.go`), so that `kubectl rdma` reads like the
//! kubectl it extends: one message on stderr, exit 1, and never a Rust type or
//! a hyper internal (`ServiceError: client error (Connect)`).
//!
//! - the API server answered: `Error from server (Reason): message`
//!   ([`crate::api::describe`]), or for 401 `error: You must be logged in to the
//!   server (message)`;
//! - the connection was refused: `The connection to the server HOST:PORT was
//!   refused - did you specify the right host or port?`;
//! - any other failure to reach it (timeout, DNS, TLS): `Unable to connect to the
//!   server: <the innermost cause>`;
//! - a usage error: `error: <what>` and `See 'kubectl rdma CMD --help' for usage.`;
//! - anything else: `error: <what>: <cause>: ...`.

use std::error::Error as StdError;

use super::view::FetchError;

/// An error already worded as kubectl would word it: printed as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Worded(pub String);

/// The `host:port` kubectl names in its connection errors (`url.Parse(...).Host`),
/// with the scheme's default port when the URL has none.
pub fn host_port(server: &http::Uri) -> String {
    let host = server.host().unwrap_or("");
    match server.port_u16() {
        Some(p) => format!("{host}:{p}"),
        None if server.scheme_str() == Some("http") => format!("{host}:80"),
        None => format!("{host}:443"),
    }
}

/// Each error of the chain from `e` down to its innermost cause.
fn chain<'a>(e: &'a (dyn StdError + 'static)) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(e), |e: &&'a (dyn StdError + 'static)| (*e).source())
}

/// A failure to reach or hear from the API server at `server`, worded as kubectl
/// does (see the module docs); `None` when `e` is neither (then it is
/// [`line`]'s `error: ...`).
pub fn from_server(e: &kube::Error, server: &http::Uri) -> Option<Worded> {
    if let kube::Error::Api(s) = e {
        if s.code == 401 {
            return Some(Worded(format!("error: You must be logged in to the server ({})", s.message)));
        }
        return Some(Worded(crate::api::describe(e)));
    }
    let refused = chain(e).any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    });
    if refused {
        return Some(Worded(format!(
            "The connection to the server {} was refused - did you specify the right host or port?",
            host_port(server)
        )));
    }
    // Any other failure of the transport: hyper's, the TLS stack's, a timeout.
    matches!(e, kube::Error::HyperError(_) | kube::Error::Service(_)).then(|| {
        let innermost = chain(e).last().map(|c| c.to_string()).unwrap_or_default();
        Worded(format!("Unable to connect to the server: {innermost}"))
    })
}

/// [`from_server`] for a read of `kubectl rdma`; a request that got no answer
/// within `--request-timeout` is a connection that failed, as in kubectl.
pub fn from_fetch(e: &FetchError, server: &http::Uri) -> Option<Worded> {
    match e {
        FetchError::Api(a) => from_server(&a.source, server),
        FetchError::Timeout { after, .. } => Some(Worded(format!(
            "Unable to connect to the server: no answer within {} (--request-timeout)",
            humantime(*after)
        ))),
    }
}

/// `2s`, `1.5s`, `500ms`: a timeout as it was probably given.
fn humantime(d: std::time::Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < std::time::Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

/// The one stderr message for an error at the binary's edge: a [`Worded`] error
/// as it is, else `error: ` and the error with its causes.
pub fn line(e: &anyhow::Error) -> String {
    match e.downcast_ref::<Worded>() {
        Some(w) => w.0.clone(),
        None => format!("error: {e:#}"),
    }
}

/// A command-line error as kubectl prints one: clap's message (its `error: ...`
/// and what it adds before the first blank line, e.g. the possible values; never
/// its tips, usage or `--help` hint), then where to read the usage of `command`
/// (`kubectl rdma status`).
pub fn usage(clap_rendered: &str, command: &str) -> String {
    let message: Vec<&str> = clap_rendered
        .trim_start()
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| !l.trim_start().starts_with("tip:"))
        .collect();
    let message = match message.first() {
        Some(first) if first.starts_with("error: ") => message.join("\n"),
        Some(_) => format!("error: {}", message.join("\n")),
        None => "error: invalid arguments".into(),
    };
    format!("{message}\nSee '{command} --help' for usage.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap()
    }

    #[test]
    fn a_refused_connection_is_kubectls_sentence_naming_host_and_port() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "tcp connect error");
        let e = kube::Error::Service(Box::new(io));
        let w = from_server(&e, &uri("https://127.0.0.1:6443")).unwrap();
        let timeout = FetchError::Timeout {
            op: "list rdmanodestates".into(),
            after: std::time::Duration::from_millis(1500),
        };
        assert_eq!(
            from_fetch(&timeout, &uri("https://h")).unwrap().0,
            "Unable to connect to the server: no answer within 1.5s (--request-timeout)"
        );
        assert_eq!(
            w.0,
            "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?"
        );
        assert_eq!(host_port(&uri("https://api.example")), "api.example:443");
        assert_eq!(host_port(&uri("http://localhost")), "localhost:80");
    }

    #[test]
    fn other_transport_failures_name_only_the_innermost_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out");
        let e = kube::Error::Service(Box::new(io));
        assert_eq!(
            from_server(&e, &uri("https://10.0.0.1")).unwrap().0,
            "Unable to connect to the server: connection timed out"
        );
    }

    #[test]
    fn an_answer_of_the_server_is_error_from_server_and_401_asks_for_a_login() {
        let status = |code: u16, reason: &str| {
            kube::Error::Api(
                kube::core::Status::failure(
                    "rdmanodestates.kuberdma.io is forbidden: User \"u\" cannot list",
                    reason,
                )
                .with_code(code)
                .boxed(),
            )
        };
        let server = uri("https://127.0.0.1:6443");
        assert_eq!(
            from_server(&status(403, "Forbidden"), &server).unwrap().0,
            "Error from server (Forbidden): rdmanodestates.kuberdma.io is forbidden: User \"u\" cannot list"
        );
        assert!(from_server(&status(401, "Unauthorized"), &server)
            .unwrap()
            .0
            .starts_with("error: You must be logged in to the server (rdmanodestates"));
    }

    #[test]
    fn anything_else_is_error_and_its_causes_and_worded_errors_print_as_they_are() {
        let e = anyhow::anyhow!("no such file").context("loading simulated node /x.yaml");
        assert_eq!(line(&e), "error: loading simulated node /x.yaml: no such file");
        assert_eq!(
            line(&anyhow::Error::new(Worded("Error from server (NotFound): x".into()))),
            "Error from server (NotFound): x"
        );
    }

    #[test]
    fn a_usage_error_is_clap_s_first_line_and_kubectl_s_pointer_to_help() {
        let rendered = "error: unexpected argument '--foo' found\n\n  tip: to pass '--foo' as a value, use '-- --foo'\n\nUsage: kubectl rdma status [OPTIONS] [NODES]...\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage(rendered, "kubectl rdma status"),
            "error: unexpected argument '--foo' found\nSee 'kubectl rdma status --help' for usage."
        );
        let rendered = "error: invalid value 'x' for '--output <OUTPUT>'\n  [possible values: json, yaml]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage(rendered, "kubectl rdma version"),
            "error: invalid value 'x' for '--output <OUTPUT>'\n  [possible values: json, yaml]\nSee 'kubectl rdma version --help' for usage."
        );
    }
}
