//! The HTTP side: accept loop (TCP, optionally TLS), one hyper HTTP/1.1
//! connection per socket, and the request handler: authentication, faults,
//! routing, verbs, content negotiation and the request log.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited, StreamBody};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::error::ApiError;
use crate::faults::{FaultAction, Faults};
use crate::log::{OpenWatch, RequestLog, RequestRecord};
use crate::object::{self, meta_str};
use crate::patch::PatchKind;
use crate::resources::{self, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Preconditions, ResId, Since, Store, Target};
use crate::watch::{self, WatchSpec};

/// Largest request body accepted (the real server's limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// A watch without `timeoutSeconds` ends after this long (the real server
/// picks 1–2 × `--min-request-timeout`, default 1800 s).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// How long a keep-alive connection may sit idle (see `serve_http`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// State shared by every connection.
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) faults: Faults,
    pub(crate) log: Arc<RequestLog>,
    /// `(token, user)`.
    pub(crate) tokens: Vec<(String, String)>,
    pub(crate) bookmark_interval: Duration,
    /// Bumped to abort every open watch stream.
    pub(crate) close_watches: tokio::sync::watch::Sender<u64>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// The handler's way to make hyper close the connection without answering.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
struct DropConnection;

/// Accepts connections until the task is aborted (dropping it aborts every
/// connection task too).
pub(crate) async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _peer)) => {
                    // Watch events are small writes that must not wait for Nagle.
                    let _ = tcp.set_nodelay(true);
                    conns.spawn(serve_conn(tcp, tls.clone(), shared.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_conn(tcp: tokio::net::TcpStream, tls: Option<TlsAcceptor>, shared: Arc<Shared>) {
    match tls {
        Some(acceptor) => match acceptor.accept(tcp).await {
            Ok(stream) => serve_http(TokioIo::new(stream), shared).await,
            Err(e) => tracing::debug!(error = %e, "TLS handshake failed"),
        },
        None => serve_http(TokioIo::new(tcp), shared).await,
    }
}

async fn serve_http<I>(io: I, shared: Arc<Shared>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| handle(req, shared.clone()));
    // hyper's header-read timer also runs while a keep-alive connection
    // waits for its next request, so it acts as the idle timeout: 90 s like
    // kube-apiserver's `IdleTimeout` (apiserver secure_serving.go), not
    // hyper's default 30 s, which would close idle client connections early.
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(IDLE_TIMEOUT)
        .serve_connection(io, svc);
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "connection ended");
    }
}

/// Parsed query string.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Self {
        Query(form_urlencoded::parse(q.as_bytes()).into_owned().collect())
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

enum Outcome {
    Reply(Response<Body>),
    Drop,
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<Body>, DropConnection> {
    let at = Instant::now();
    let wall = SystemTime::now();
    let path = req.uri().path().to_string();
    let query_str = req.uri().query().unwrap_or_default().to_string();
    let query = Query::parse(&query_str);
    let is_watch = req.method() == Method::GET && query.flag("watch");
    let user_agent = header_str(req.headers(), header::USER_AGENT).to_string();
    let user = authenticate(&shared, req.headers());
    let seq = shared.log.push(RequestRecord {
        seq: 0,
        method: req.method().to_string(),
        path: path.clone(),
        query: query_str.clone(),
        watch: is_watch,
        status: 0,
        user_agent,
        user: match &user {
            Auth::User(u) => u.clone(),
            Auth::Anonymous => "system:anonymous".into(),
            Auth::Invalid => "invalid-token".into(),
        },
        at,
        wall,
        ended: None,
    });
    match respond(req, &shared, &path, &query, is_watch, user, seq).await {
        Outcome::Reply(resp) => {
            shared.log.set_status(seq, resp.status().as_u16());
            Ok(resp)
        }
        Outcome::Drop => Err(DropConnection),
    }
}

enum Auth {
    User(String),
    Anonymous,
    Invalid,
}

fn authenticate(shared: &Shared, headers: &HeaderMap) -> Auth {
    let Some(v) = headers.get(header::AUTHORIZATION) else { return Auth::Anonymous };
    let v = v.to_str().unwrap_or_default();
    let Some(token) = v.strip_prefix("Bearer ").map(str::trim) else { return Auth::Invalid };
    shared.tokens.iter().find(|(t, _)| t == token).map_or(Auth::Invalid, |(_, u)| Auth::User(u.clone()))
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// Paths the real server's default RBAC lets anonymous users read.
fn is_public(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"].iter().any(|p| path == *p || path.starts_with(&format!("{p}/")))
        || path == "/version"
}

async fn respond(
    req: Request<Incoming>,
    shared: &Arc<Shared>,
    path: &str,
    query: &Query,
    is_watch: bool,
    user: Auth,
    seq: u64,
) -> Outcome {
    match user {
        Auth::Invalid => return error(&ApiError::unauthorized()),
        Auth::Anonymous if !is_public(path) => return error(&ApiError::forbidden_anonymous(path)),
        _ => {}
    }
    let decision = shared.faults.decide(req.method(), path, is_watch);
    if decision.action.is_some() || !decision.delay.is_zero() {
        shared.log.counters.faults_fired.fetch_add(1, Ordering::Relaxed);
    }
    if !decision.delay.is_zero() {
        tokio::time::sleep(decision.delay).await;
    }
    let mut watch_fault = None;
    match decision.action {
        Some(FaultAction::Status { code, retry_after }) => {
            let mut e =
                ApiError::from_code(code, format!("injected fault: {code} for {} {path}", req.method()));
            e.retry_after_seconds = retry_after;
            return error(&e);
        }
        Some(FaultAction::DropConnection) => return Outcome::Drop,
        Some(a @ (FaultAction::DropWatchAfter(_) | FaultAction::ExpireWatchAfter(_))) => {
            watch_fault = Some(a);
        }
        Some(FaultAction::Latency(_)) | None => {}
    }
    match route(req, shared, path, query, is_watch, watch_fault, seq).await {
        Ok(o) => o,
        Err(e) => error(&e),
    }
}

fn json_response(code: u16, body: &Value) -> Outcome {
    bytes_response(code, Bytes::from(serde_json::to_vec(body).unwrap_or_default()))
}

fn bytes_response(code: u16, body: Bytes) -> Outcome {
    let resp = Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body))
        .expect("static parts are valid");
    Outcome::Reply(resp)
}

fn full(b: Bytes) -> Body {
    Full::new(b).map_err(|e: Infallible| match e {}).boxed()
}

fn error(e: &ApiError) -> Outcome {
    let mut resp = Response::builder()
        .status(StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(s) = e.retry_after_seconds {
        resp = resp.header(header::RETRY_AFTER, s.to_string());
    }
    let body = Bytes::from(serde_json::to_vec(&e.to_status()).unwrap_or_default());
    Outcome::Reply(resp.body(full(body)).expect("static parts are valid"))
}

fn text(body: &'static str) -> Outcome {
    let resp = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(Bytes::from_static(body.as_bytes())))
        .expect("static parts are valid");
    Outcome::Reply(resp)
}

/// A request path taken apart (before the resource is looked up).
#[derive(Debug, PartialEq)]
enum PathKind<'a> {
    Root,
    Health,
    Version,
    Api,
    Apis,
    Group(&'a str),
    GroupVersion(&'a str, &'a str),
    Resource {
        group: &'a str,
        version: &'a str,
        ns: Option<&'a str>,
        plural: &'a str,
        name: Option<&'a str>,
        sub: Option<&'a str>,
    },
    Unknown,
}

fn parse_path(path: &str) -> PathKind<'_> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        [] => return PathKind::Root,
        ["healthz" | "livez" | "readyz", ..] => return PathKind::Health,
        ["version"] => return PathKind::Version,
        ["api"] => return PathKind::Api,
        ["apis"] => return PathKind::Apis,
        ["api", v] => return PathKind::GroupVersion("", v),
        ["apis", g] => return PathKind::Group(g),
        ["apis", g, v] => return PathKind::GroupVersion(g, v),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return PathKind::Unknown,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" && *plural != "finalize" => {
            (Some(*ns), std::iter::once(plural).chain(tail).copied().collect::<Vec<_>>())
        }
        _ => (None, rest.to_vec()),
    };
    match rest.as_slice() {
        [plural] => PathKind::Resource { group, version, ns, plural, name: None, sub: None },
        [plural, name] => PathKind::Resource { group, version, ns, plural, name: Some(name), sub: None },
        [plural, name, sub] => {
            PathKind::Resource { group, version, ns, plural, name: Some(name), sub: Some(sub) }
        }
        _ => PathKind::Unknown,
    }
}

/// Response shape the client asked for with `Accept`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Accept {
    full: bool,
    meta: bool,
    meta_list: bool,
}

fn negotiate(accept: &str) -> Accept {
    if accept.trim().is_empty() {
        return Accept { full: true, meta: false, meta_list: false };
    }
    let mut a = Accept { full: false, meta: false, meta_list: false };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let mime = parts.next().unwrap_or_default();
        if !matches!(mime, "application/json" | "*/*" | "application/*") {
            continue;
        }
        let params: Vec<(&str, &str)> =
            parts.filter_map(|p| p.split_once('=')).map(|(k, v)| (k.trim(), v.trim())).collect();
        let get = |k: &str| params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
        match get("as") {
            None => a.full = true,
            Some(kind) if get("g") == Some("meta.k8s.io") && matches!(get("v"), Some("v1" | "v1beta1")) => {
                match kind {
                    "PartialObjectMetadata" => a.meta = true,
                    "PartialObjectMetadataList" => a.meta_list = true,
                    _ => {}
                }
            }
            Some(_) => {}
        }
    }
    a
}

/// Which rendering an object response gets.
fn object_form(accept: &Accept, raw: &str) -> Result<bool, ApiError> {
    if accept.meta {
        Ok(true)
    } else if accept.full {
        Ok(false)
    } else {
        Err(ApiError::not_acceptable(raw))
    }
}

fn render_object(obj: &Value, metadata_only: bool) -> Value {
    if metadata_only {
        object::partial_metadata(obj)
    } else {
        obj.clone()
    }
}

async fn read_body(req: Request<Incoming>) -> Result<(HeaderMap, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::from_code(413, format!("reading the request body: {e}")))?
        .to_bytes();
    Ok((parts.headers, bytes))
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = header_str(headers, header::CONTENT_TYPE);
    if ct.starts_with("application/yaml") {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))
    } else {
        parse_json(body)
    }
}

#[allow(clippy::too_many_arguments)]
async fn route(
    req: Request<Incoming>,
    shared: &Arc<Shared>,
    path: &str,
    query: &Query,
    is_watch: bool,
    watch_fault: Option<FaultAction>,
    seq: u64,
) -> Result<Outcome, ApiError> {
    let store = &shared.store;
    let method = req.method().clone();
    let kind = parse_path(path);
    let discovery = |v: Value| {
        if method == Method::GET {
            Ok(json_response(200, &v))
        } else {
            Err(ApiError::method_not_allowed(&method))
        }
    };
    match kind {
        PathKind::Root => {
            let mut paths = vec![
                "/api".to_string(),
                "/api/v1".into(),
                "/apis".into(),
                "/healthz".into(),
                "/livez".into(),
                "/readyz".into(),
                "/version".into(),
            ];
            for t in store.resources().iter().filter(|t| !t.group.is_empty()) {
                paths.push(format!("/apis/{}", t.group));
                paths.push(format!("/apis/{}", t.api_version()));
            }
            paths.sort();
            paths.dedup();
            discovery(json!({"paths": paths}))
        }
        PathKind::Health => Ok(text("ok")),
        PathKind::Version => discovery(json!({
            "major": "1", "minor": "34", "gitVersion": "v1.34.0-kube-rdma-apiemu",
            "gitCommit": "", "gitTreeState": "clean", "buildDate": "", "goVersion": "",
            "compiler": "rust", "platform": "linux/amd64",
        })),
        PathKind::Api => discovery(resources::core_versions()),
        PathKind::Apis => discovery(resources::group_list(&groups(&store.resources()))),
        PathKind::Group(g) => {
            let groups = groups(&store.resources());
            let (_, versions) = groups.iter().find(|(name, _)| name == g).ok_or_else(ApiError::no_route)?;
            discovery(resources::api_group(g, versions))
        }
        PathKind::GroupVersion(g, v) => {
            let all = store.resources();
            let types: Vec<&ResourceType> = all.iter().filter(|t| t.group == g && t.version == v).collect();
            if types.is_empty() {
                return Err(ApiError::no_route());
            }
            let gv = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
            discovery(resources::resource_list(&gv, types.into_iter()))
        }
        PathKind::Unknown => Err(ApiError::no_route()),
        PathKind::Resource { group, version, ns, plural, name, sub } => {
            let (res, ty) = store.resolve(group, version, plural).ok_or_else(ApiError::no_route)?;
            if ns.is_some() && !ty.namespaced {
                return Err(ApiError::no_route());
            }
            if name.is_some() && ty.namespaced && ns.is_none() {
                return Err(ApiError::no_route());
            }
            let target = match sub {
                None => Target::Main,
                Some("status") if ty.status_subresource => Target::Status,
                Some(_) => return Err(ApiError::no_route()),
            };
            let ctx = Ctx { shared, res, ty, ns, query, seq };
            if query.get("dryRun").is_some() && method != Method::GET {
                return Err(ApiError::bad_request("dryRun is not supported by the API emulator"));
            }
            match (name, method.clone()) {
                (None, Method::GET) if is_watch => ctx.watch(&req, None, watch_fault),
                (None, Method::GET) => ctx.list(&req),
                (None, Method::POST) if ns.is_some() || !ctx.ty.namespaced => ctx.create(req).await,
                (None, Method::DELETE) => ctx.delete_collection(&req),
                (Some(name), Method::GET) if is_watch && target == Target::Main => {
                    ctx.watch(&req, Some(name), watch_fault)
                }
                (Some(name), Method::GET) => ctx.get(&req, name),
                (Some(name), Method::PUT) => ctx.replace(req, name, target).await,
                (Some(name), Method::PATCH) => ctx.patch(req, name, target).await,
                (Some(name), Method::DELETE) if target == Target::Main => ctx.delete(req, name).await,
                _ => Err(ApiError::method_not_allowed(&method)),
            }
        }
    }
}

/// Non-core groups and their versions, in table order.
fn groups(types: &[ResourceType]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, vs)) if !vs.contains(&t.version) => vs.push(t.version.clone()),
            Some(_) => {}
            None => out.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    out
}

/// One resource request's context.
struct Ctx<'a> {
    shared: &'a Arc<Shared>,
    res: ResId,
    ty: Arc<ResourceType>,
    ns: Option<&'a str>,
    query: &'a Query,
    seq: u64,
}

impl Ctx<'_> {
    fn selectors(&self) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels = LabelSelector::parse(self.query.get("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse labelSelector: {e}")))?;
        let fields = FieldSelector::parse(
            self.query.get("fieldSelector").unwrap_or_default(),
            &self.ty.field_selectors,
        )
        .map_err(|e| ApiError::bad_request(format!("unable to parse fieldSelector: {e}")))?;
        Ok((labels, fields))
    }

    fn accept(req: &Request<Incoming>) -> (Accept, String) {
        let raw = header_str(req.headers(), header::ACCEPT).to_string();
        (negotiate(&raw), raw)
    }

    fn get(&self, req: &Request<Incoming>, name: &str) -> Result<Outcome, ApiError> {
        let (accept, raw) = Self::accept(req);
        let md = object_form(&accept, &raw)?;
        let obj = self.shared.store.get_obj(self.res, self.ns, name)?;
        Ok(json_response(200, &render_object(&obj, md)))
    }

    fn list(&self, req: &Request<Incoming>) -> Result<Outcome, ApiError> {
        let (accept, raw) = Self::accept(req);
        let md = if accept.meta_list {
            true
        } else if accept.full {
            false
        } else {
            return Err(ApiError::not_acceptable(&raw));
        };
        let (labels, fields) = self.selectors()?;
        let limit: usize = match self.query.get("limit") {
            None | Some("") => 0,
            Some(l) => l.parse().map_err(|_| ApiError::bad_request(format!("limit: invalid value {l:?}")))?,
        };
        let after = match self.query.get("continue").filter(|c| !c.is_empty()) {
            Some(c) => Some(decode_continue(c)?),
            None => None,
        };
        let (items, rv) = self.shared.store.list_objs(self.res, self.ns);
        let matching: Vec<&Value> = items
            .iter()
            .map(|o| &**o)
            .filter(|o| labels.matches(o) && fields.matches(o))
            .filter(|o| match &after {
                Some((ns, name)) => {
                    (meta_str(o, "namespace").unwrap_or_default(), meta_str(o, "name").unwrap_or_default())
                        > (ns.as_str(), name.as_str())
                }
                None => true,
            })
            .collect();
        let (page, remaining) = if limit > 0 && matching.len() > limit {
            (&matching[..limit], matching.len() - limit)
        } else {
            (&matching[..], 0)
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if remaining > 0 {
            let last = page.last().expect("limit > 0, so the page is not empty");
            metadata["continue"] = json!(encode_continue(
                meta_str(last, "namespace").unwrap_or_default(),
                meta_str(last, "name").unwrap_or_default()
            ));
            metadata["remainingItemCount"] = json!(remaining);
        }
        let (kind, api_version) = if md {
            ("PartialObjectMetadataList".to_string(), "meta.k8s.io/v1".to_string())
        } else {
            (format!("{}List", self.ty.kind), self.ty.api_version())
        };
        // Written piecewise so the items are serialized straight from the store's copies.
        let mut out = Vec::with_capacity(256 + page.len() * 512);
        out.extend_from_slice(
            format!(
                "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{}",
                json!(kind),
                json!(api_version),
                metadata
            )
            .as_bytes(),
        );
        out.extend_from_slice(b",\"items\":[");
        for (i, o) in page.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if md {
                serde_json::to_writer(&mut out, &object::partial_metadata(o)).unwrap_or_default();
            } else {
                serde_json::to_writer(&mut out, o).unwrap_or_default();
            }
        }
        out.extend_from_slice(b"]}");
        Ok(bytes_response(200, Bytes::from(out)))
    }

    fn watch(
        &self,
        req: &Request<Incoming>,
        name: Option<&str>,
        fault: Option<FaultAction>,
    ) -> Result<Outcome, ApiError> {
        let (accept, raw) = Self::accept(req);
        let md = object_form(&accept, &raw)?;
        let (labels, mut fields) = self.selectors()?;
        if let Some(n) = name {
            fields = fields.and_name(n);
        }
        let bookmarks = self.query.flag("allowWatchBookmarks");
        let initial = self.query.flag("sendInitialEvents");
        if initial {
            // ListOptions validation (apimachinery's validation.go).
            if self.query.get("resourceVersionMatch") != Some("NotOlderThan") {
                return Err(ApiError::from_code(422, "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"));
            }
            if !bookmarks {
                return Err(ApiError::from_code(422, "allowWatchBookmarks: Required value: sendInitialEvents requires allowWatchBookmarks=true"));
            }
        }
        let since = match self.query.get("resourceVersion") {
            None | Some("" | "0") => Since::Now,
            Some(_) if initial => Since::Now,
            Some(s) => Since::Rv(
                s.parse()
                    .map_err(|_| ApiError::bad_request(format!("resourceVersion: invalid value {s:?}")))?,
            ),
        };
        let timeout = match self.query.get("timeoutSeconds") {
            None | Some("" | "0") => DEFAULT_WATCH_TIMEOUT,
            Some(t) => Duration::from_secs(
                t.parse()
                    .map_err(|_| ApiError::bad_request(format!("timeoutSeconds: invalid value {t:?}")))?,
            ),
        };
        let start = match self.shared.store.watch(self.res, since, fields.required_name()) {
            Ok(s) => s,
            Err(e) if e.code == 410 => {
                // The real server answers 200 and sends the error as the only
                // event (`newErrWatcher` in the cacher).
                let line = format!("{{\"type\":\"ERROR\",\"object\":{}}}\n", e.to_status());
                return Ok(bytes_response(200, Bytes::from(line)));
            }
            Err(e) => return Err(e),
        };
        let spec = WatchSpec {
            ty: self.ty.clone(),
            namespace: self.ns.map(str::to_string),
            labels,
            fields,
            metadata_only: md,
            bookmarks,
            initial_events_end: initial,
            timeout: Some(timeout),
            drop_after: match fault {
                Some(FaultAction::DropWatchAfter(k)) => Some(k),
                _ => None,
            },
            expire_after: match fault {
                Some(FaultAction::ExpireWatchAfter(k)) => Some(k),
                _ => None,
            },
        };
        let open = OpenWatch::new(self.shared.log.clone(), self.seq);
        let stream = watch::stream(self.shared.clone(), spec, start, open);
        let body = StreamBody::new(stream).map_err(|e| -> BoxError { Box::new(e) }).boxed();
        let resp = Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .expect("static parts are valid");
        Ok(Outcome::Reply(resp))
    }

    async fn create(&self, req: Request<Incoming>) -> Result<Outcome, ApiError> {
        let (accept, raw) = Self::accept(&req);
        let md = object_form(&accept, &raw)?;
        let (headers, body) = read_body(req).await?;
        let obj = parse_body(&headers, &body)?;
        let stored = self.shared.store.create_obj(self.res, self.ns, obj, false)?;
        Ok(json_response(201, &render_object(&stored, md)))
    }

    async fn replace(&self, req: Request<Incoming>, name: &str, target: Target) -> Result<Outcome, ApiError> {
        let (accept, raw) = Self::accept(&req);
        let md = object_form(&accept, &raw)?;
        let (headers, body) = read_body(req).await?;
        let obj = parse_body(&headers, &body)?;
        let stored = self.shared.store.replace(self.res, self.ns, name, obj, target)?;
        Ok(json_response(200, &render_object(&stored, md)))
    }

    async fn patch(&self, req: Request<Incoming>, name: &str, target: Target) -> Result<Outcome, ApiError> {
        let (accept, raw) = Self::accept(&req);
        let md = object_form(&accept, &raw)?;
        let (headers, body) = read_body(req).await?;
        let ct = header_str(&headers, header::CONTENT_TYPE);
        let kind = PatchKind::from_content_type(ct).ok_or_else(|| ApiError::unsupported_media_type(ct))?;
        match self.query.get("force") {
            None => {}
            Some("true" | "false") if kind == PatchKind::Apply => {}
            Some("true" | "false") => {
                return Err(ApiError::from_code(
                    422,
                    "force: Forbidden: may not be specified for non-apply patch",
                ));
            }
            Some(other) => return Err(ApiError::bad_request(format!("force: invalid value {other:?}"))),
        }
        let patch = if kind == PatchKind::Apply {
            serde_yaml::from_slice::<Value>(&body).map_err(|e| {
                ApiError::bad_request(format!("the apply configuration is not valid YAML or JSON: {e}"))
            })?
        } else {
            parse_json(&body)?
        };
        let (stored, created) = self.shared.store.patch(
            self.res,
            self.ns,
            name,
            kind,
            &patch,
            target,
            self.query.get("fieldManager"),
        )?;
        Ok(json_response(if created { 201 } else { 200 }, &render_object(&stored, md)))
    }

    async fn delete(&self, req: Request<Incoming>, name: &str) -> Result<Outcome, ApiError> {
        let (accept, raw) = Self::accept(&req);
        let md = object_form(&accept, &raw)?;
        let (_, body) = read_body(req).await?;
        let mut pre = Preconditions::default();
        if !body.iter().all(u8::is_ascii_whitespace) {
            let opts = parse_json(&body)?;
            pre.uid = opts.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
            pre.resource_version =
                opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string);
        }
        let stored = self.shared.store.delete_obj(self.res, self.ns, name, &pre)?;
        Ok(json_response(200, &render_object(&stored, md)))
    }

    fn delete_collection(&self, req: &Request<Incoming>) -> Result<Outcome, ApiError> {
        let (accept, raw) = Self::accept(req);
        let md = object_form(&accept, &raw)?;
        let (labels, fields) = self.selectors()?;
        let (items, _) = self.shared.store.list_objs(self.res, self.ns);
        let mut deleted = Vec::new();
        for o in items.iter().filter(|o| labels.matches(o) && fields.matches(o)) {
            let ns = meta_str(o, "namespace");
            let name = meta_str(o, "name").unwrap_or_default();
            match self.shared.store.delete_obj(self.res, ns, name, &Preconditions::default()) {
                Ok(d) => deleted.push(render_object(&d, md)),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let rv = self.shared.store.resource_version();
        Ok(json_response(
            200,
            &json!({"kind": format!("{}List", self.ty.kind), "apiVersion": self.ty.api_version(),
                    "metadata": {"resourceVersion": rv.to_string()}, "items": deleted}),
        ))
    }
}

/// `continue` tokens: the last returned key, base64url-encoded.
fn encode_continue(ns: &str, name: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{ns}/{name}"))
}

fn decode_continue(token: &str) -> Result<(String, String), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let s = String::from_utf8(raw).map_err(|_| bad())?;
    let (ns, name) = s.split_once('/').ok_or_else(bad)?;
    Ok((ns.to_string(), name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_apart_like_the_api_server_routes() {
        assert_eq!(
            parse_path("/api/v1/nodes"),
            PathKind::Resource { group: "", version: "v1", ns: None, plural: "nodes", name: None, sub: None }
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/default/pods/p/status"),
            PathKind::Resource {
                group: "",
                version: "v1",
                ns: Some("default"),
                plural: "pods",
                name: Some("p"),
                sub: Some("status")
            }
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/default/status"),
            PathKind::Resource {
                group: "",
                version: "v1",
                ns: None,
                plural: "namespaces",
                name: Some("default"),
                sub: Some("status")
            }
        );
        assert_eq!(
            parse_path("/apis/kuberdma.io/v1alpha1/rdmanodestates/n1/status"),
            PathKind::Resource {
                group: "kuberdma.io",
                version: "v1alpha1",
                ns: None,
                plural: "rdmanodestates",
                name: Some("n1"),
                sub: Some("status")
            }
        );
        assert_eq!(parse_path("/apis/kuberdma.io"), PathKind::Group("kuberdma.io"));
        assert_eq!(parse_path("/readyz/ping"), PathKind::Health);
        assert_eq!(parse_path("/api/v1/a/b/c/d"), PathKind::Unknown);
    }

    #[test]
    fn accept_headers_select_metadata_only_forms() {
        let a = negotiate("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1");
        assert!(a.meta_list && !a.full && !a.meta);
        let a = negotiate("application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
        assert!(a.full && !a.meta);
        assert!(negotiate("").full);
        assert!(!negotiate("application/vnd.kubernetes.protobuf").full);
    }

    #[test]
    fn continue_tokens_round_trip() {
        assert_eq!(
            decode_continue(&encode_continue("ns", "a/b")).unwrap(),
            ("ns".to_string(), "a/b".to_string())
        );
        assert_eq!(decode_continue("!!").unwrap_err().code, 400);
    }
}
