//! The one tiny HTTP/1 responder of the daemons' `/metrics`, `/healthz` and
//! `/livez` (the device plugin, DRA mode, the operator's agent and
//! controller). Prometheus and the kubelet's probes send one `GET` and read
//! until the connection closes, so this answers one request per connection and
//! closes it: no keep-alive, no bodies read, no chunking.
//!
//! - The request head is read across partial reads until its blank line, up
//!   to [`MAX_HEAD`] bytes (431 beyond) and for at most [`HEAD_TIMEOUT`]; a
//!   connection that sends nothing in that time is closed unanswered.
//! - The route is the path alone: `/metrics?x=1` is `/metrics` (Prometheus
//!   `params:`, a cache buster).
//! - `GET` and `HEAD` only (`HEAD`: the same headers, no body); another
//!   method is 405 with `Allow`, a request line that is not HTTP/1 is 400, an
//!   unknown path 404 naming the known ones.
//! - A failed `accept` (EMFILE, ENFILE, ENOBUFS) is logged and retried after
//!   [`ACCEPT_BACKOFF`] instead of spinning: the error stays until a
//!   descriptor is freed, and a loop retrying at once burns a core.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head read (request line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause after a failed `accept`.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The Prometheus text format's content type.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// What a route answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status code and reason, e.g. `200 OK`.
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: String,
}

impl Answer {
    /// 200 with a `/metrics` page (Prometheus text format 0.0.4).
    pub fn metrics(body: String) -> Self {
        Self { status: "200 OK", content_type: PROMETHEUS_TEXT, body }
    }

    /// A health page: 200 when `healthy`, else 503 (the body says why).
    pub fn health(healthy: bool, body: String) -> Self {
        let status = if healthy { "200 OK" } else { "503 Service Unavailable" };
        Self { status, content_type: "text/plain", body }
    }

    fn plain(status: &'static str, body: String) -> Self {
        Self { status, content_type: "text/plain", body }
    }
}

type Handler = Box<dyn Fn() -> Answer + Send + Sync>;

/// Paths and what each answers; any other path is 404.
#[derive(Default)]
pub struct Routes {
    routes: Vec<(&'static str, Handler)>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.routes.iter().map(|(p, _)| p)).finish()
    }
}

impl Routes {
    /// No routes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `path` (without query) answers what `answer` returns at the time of the request.
    pub fn route(mut self, path: &'static str, answer: impl Fn() -> Answer + Send + Sync + 'static) -> Self {
        self.routes.push((path, Box::new(answer)));
        self
    }

    /// The routes every daemon serves, and no others: `/metrics` (`metrics()`, the
    /// page, then [`crate::prometheus::build_info`]), `/healthz` (`health()`: 200
    /// when healthy, else 503 with the reason as the body), `/livez` (200 while the
    /// process answers: a liveness probe that an API outage does not fail). Any
    /// other path, `/` included, is 404.
    pub fn daemon(
        metrics: impl Fn() -> String + Send + Sync + 'static,
        health: impl Fn() -> (bool, String) + Send + Sync + 'static,
    ) -> Self {
        Routes::new()
            .route("/metrics", move || {
                let mut text = metrics();
                crate::prometheus::build_info(&mut text);
                Answer::metrics(text)
            })
            .route("/healthz", move || {
                let (ok, body) = health();
                Answer::health(ok, body)
            })
            .livez()
    }

    /// `/livez`: 200 `ok` while the process answers at all.
    pub fn livez(self) -> Self {
        self.route("/livez", || Answer::plain("200 OK", "ok\n".into()))
    }

    fn answer(&self, path: &str) -> Answer {
        match self.routes.iter().find(|(p, _)| *p == path) {
            Some((_, f)) => f(),
            None => {
                let known: Vec<&str> = self.routes.iter().map(|(p, _)| *p).collect();
                Answer::plain("404 Not Found", format!("not found: try {}\n", known.join(", ")))
            }
        }
    }
}

/// Binds `addr` and returns the bound address (port 0 picks one) and the
/// serving future, which runs until dropped.
pub async fn bind(
    addr: SocketAddr,
    routes: Routes,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((local, serve(listener, routes)))
}

/// Serves `routes` on `listener` until the future is dropped.
pub async fn serve(listener: TcpListener, routes: Routes) {
    let listener = Arc::new(listener);
    accept_loop(
        move || {
            let l = listener.clone();
            async move { l.accept().await.map(|(s, _)| s) }
        },
        Arc::new(routes),
        Limits::DEFAULT,
    )
    .await;
}

/// The bounds on one request head (tests shorten the timeout).
#[derive(Debug, Clone, Copy)]
struct Limits {
    head: usize,
    timeout: Duration,
}

impl Limits {
    const DEFAULT: Limits = Limits { head: MAX_HEAD, timeout: HEAD_TIMEOUT };
}

async fn accept_loop<A, F>(mut accept: A, routes: Arc<Routes>, limits: Limits)
where
    A: FnMut() -> F,
    F: Future<Output = std::io::Result<TcpStream>>,
{
    loop {
        match accept().await {
            Ok(sock) => {
                let routes = routes.clone();
                tokio::spawn(async move { respond(sock, &routes, limits).await });
            }
            Err(e) => {
                tracing::warn!(error = %e, "http accept failed; retrying in {ACCEPT_BACKOFF:?}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// What was read of a request head.
enum Head {
    /// The blank line ending it was seen (or the client stopped sending after
    /// a complete request line: answered all the same).
    Complete(Vec<u8>),
    /// Longer than the limit.
    TooLong,
    /// Nothing arrived in time, or the connection closed first.
    Nothing,
    /// Bytes without a complete request line.
    Partial,
}

async fn read_head(sock: &mut (impl AsyncRead + Unpin), limits: Limits) -> Head {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let read = async {
        loop {
            // The head ends at its blank line; bytes after it (a body) do not count.
            let end = (buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4))
                .or_else(|| buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2));
            match end {
                Some(n) => return n <= limits.head,
                None if buf.len() > limits.head => return false,
                None => {}
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let ended = tokio::time::timeout(limits.timeout, read).await;
    match ended {
        Ok(false) => Head::TooLong,
        _ if buf.is_empty() => Head::Nothing,
        _ if buf.contains(&b'\n') => Head::Complete(buf),
        _ => Head::Partial,
    }
}

/// The answer to one request head, and whether its body is sent (`HEAD`: no).
fn answer(head: &[u8], routes: &Routes) -> (Answer, bool) {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line).unwrap_or("").trim_end_matches('\r');
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return (
            Answer::plain("400 Bad Request", "bad request: expected `GET /path HTTP/1.1`\n".into()),
            true,
        );
    };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic());
    if !token(method) || !target.starts_with('/') || !version.starts_with("HTTP/1.") {
        return (
            Answer::plain("400 Bad Request", "bad request: expected `GET /path HTTP/1.1`\n".into()),
            true,
        );
    }
    if method != "GET" && method != "HEAD" {
        let why = format!("method {method} not allowed: use GET or HEAD\n");
        return (Answer::plain("405 Method Not Allowed", why), true);
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    (routes.answer(path), method == "GET")
}

async fn respond(mut sock: impl AsyncRead + AsyncWrite + Unpin, routes: &Routes, limits: Limits) {
    let (a, with_body) = match read_head(&mut sock, limits).await {
        Head::Complete(head) => answer(&head, routes),
        Head::TooLong => {
            let why = format!("request head over {} bytes\n", limits.head);
            (Answer::plain("431 Request Header Fields Too Large", why), true)
        }
        Head::Partial => (Answer::plain("400 Bad Request", "bad request: no request line\n".into()), true),
        Head::Nothing => return,
    };
    let allow = if a.status.starts_with("405") { "Allow: GET, HEAD\r\n" } else { "" };
    let mut resp = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        a.status,
        a.content_type,
        a.body.len()
    );
    if with_body {
        resp.push_str(&a.body);
    }
    let _ = sock.write_all(resp.as_bytes()).await;
    let _ = sock.shutdown().await;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    fn routes() -> Routes {
        Routes::daemon(|| "kuberdma_x 1\n".into(), || (false, "pool a: not ready\n".into()))
    }

    /// What [`routes`] serves on /metrics: the daemon's page, then the build's.
    fn page() -> String {
        let mut p = String::from("kuberdma_x 1\n");
        crate::prometheus::build_info(&mut p);
        p
    }

    /// Serves [`routes`] with `limits` on 127.0.0.1, port 0.
    async fn server(limits: Limits) -> SocketAddr {
        let l = Arc::new(TcpListener::bind("127.0.0.1:0").await.unwrap());
        let addr = l.local_addr().unwrap();
        let accept = move || {
            let l = l.clone();
            async move { l.accept().await.map(|(s, _)| s) }
        };
        tokio::spawn(accept_loop(accept, Arc::new(routes()), limits));
        addr
    }

    /// Sends `parts` (pausing between them), reads the answer to the end.
    async fn ask(addr: SocketAddr, parts: &[&[u8]]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            s.write_all(p).await.unwrap();
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    async fn get(addr: SocketAddr, target: &str) -> String {
        ask(addr, &[format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()]).await
    }

    #[tokio::test]
    async fn a_head_split_over_several_reads_is_answered_whole() {
        let addr = server(Limits::DEFAULT).await;
        let r = ask(addr, &[b"GE", b"T /metr", b"ics HTTP/1.1\r\nHo", b"st: x\r\n", b"\r\n"]).await;
        let page = page();
        assert_eq!(
            r,
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{page}",
                page.len()
            )
        );
        assert!(page.starts_with("kuberdma_x 1\n# HELP kuberdma_build_info "), "{page}");
    }

    #[tokio::test]
    async fn the_query_string_and_fragment_are_not_part_of_the_route() {
        let addr = server(Limits::DEFAULT).await;
        let plain = get(addr, "/metrics").await;
        assert_eq!(get(addr, "/metrics?x=1").await, plain);
        assert_eq!(get(addr, "/metrics#top").await, plain);
        assert!(get(addr, "/healthz?verbose").await.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(get(addr, "/livez?").await.ends_with("\r\n\r\nok\n"));
    }

    #[tokio::test]
    async fn methods_other_than_get_and_head_are_405_and_head_has_no_body() {
        let addr = server(Limits::DEFAULT).await;
        let r = ask(addr, &[b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"]).await;
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
        assert!(r.contains("\r\nAllow: GET, HEAD\r\n") && r.ends_with("use GET or HEAD\n"), "{r}");
        let r = ask(addr, &[b"HEAD /metrics HTTP/1.1\r\n\r\n"]).await;
        let length = format!("Content-Length: {}\r\n", page().len());
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains(&length), "{r}");
        assert!(r.ends_with("\r\n\r\n"), "a body after HEAD: {r}");
    }

    #[tokio::test]
    async fn garbage_is_400() {
        let addr = server(Limits::DEFAULT).await;
        for bad in [
            &b"hello\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics SPDY/3\r\n\r\n",
            b"G\xffT /metrics HTTP/1.1\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
        ] {
            let r = ask(addr, &[bad]).await;
            assert!(r.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad:?}: {r}");
        }
    }

    #[tokio::test]
    async fn an_unknown_path_is_404_naming_the_known_ones() {
        let addr = server(Limits::DEFAULT).await;
        let r = get(addr, "/nope?x=1").await;
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        assert!(r.ends_with("not found: try /metrics, /healthz, /livez\n"), "{r}");
        // The root is no alias of /metrics.
        assert!(get(addr, "/").await.starts_with("HTTP/1.1 404 Not Found\r\n"));
    }

    #[tokio::test]
    async fn a_head_over_the_bound_is_refused_and_one_sent_too_slowly_is_closed_unanswered() {
        let addr = server(Limits { head: 64, timeout: Duration::from_millis(200) }).await;
        let long = format!("GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(100));
        let r = ask(addr, &[long.as_bytes()]).await;
        assert!(r.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{r}");
        // Connected, then silent: closed after the timeout, with nothing said.
        let t0 = std::time::Instant::now();
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        assert!(out.is_empty() && t0.elapsed() >= Duration::from_millis(200), "{out:?}");
        // A request line, then silence: answered once the time is up.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /livez HTTP/1.1\r\nHost: x").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.ends_with("ok\n"), "{out}");
        // Half a request line, then silence: 400.
        let r = ask(addr, &[b"GET /liv"]).await;
        assert!(r.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{r}");
    }

    #[tokio::test]
    async fn accept_errors_back_off_instead_of_spinning_and_serving_resumes() {
        let l = Arc::new(TcpListener::bind("127.0.0.1:0").await.unwrap());
        let addr = l.local_addr().unwrap();
        let failed = Arc::new(AtomicUsize::new(0));
        let f = failed.clone();
        let accept = move || {
            let (l, f) = (l.clone(), f.clone());
            async move {
                // EMFILE for the first 3 calls: a process out of descriptors.
                if f.fetch_add(1, Ordering::SeqCst) < 3 {
                    return Err(std::io::Error::from_raw_os_error(24));
                }
                l.accept().await.map(|(s, _)| s)
            }
        };
        let t0 = std::time::Instant::now();
        tokio::spawn(accept_loop(accept, Arc::new(routes()), Limits::DEFAULT));
        // The connection waits in the backlog until the loop accepts again.
        let r = get(addr, "/livez").await;
        assert!(r.ends_with("\r\n\r\nok\n"), "{r}");
        assert!(t0.elapsed() >= 3 * ACCEPT_BACKOFF, "retried without pausing: {:?}", t0.elapsed());
        // 3 failures, the request's accept, maybe the next one waiting: no spinning.
        assert!((4..=5).contains(&failed.load(Ordering::SeqCst)), "{failed:?}");
    }
}
