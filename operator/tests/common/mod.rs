//! A scripted API server over tower-test: each expected request is checked (method,
//! path and query, content type) and answered with a canned status and JSON body.
#![allow(dead_code)]
use http::{Request, Response};
use kube::client::Body;
use serde_json::{json, Value};
use tower_test::mock::{self, Handle};

pub type ApiHandle = Handle<Request<Body>, Response<Body>>;

pub fn client() -> (kube::Client, ApiHandle) {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(svc, "default"), handle)
}

/// One recorded request.
#[derive(Debug)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub content_type: String,
    pub body: Value,
}

/// Waits for the next request, checks method and URI, answers with `status` and `reply`.
pub async fn expect(h: &mut ApiHandle, method: &str, uri: &str, status: u16, reply: Value) -> Seen {
    expect_with(h, method, uri, status, move |_| reply).await
}

/// As [`expect`], the reply built from the request body.
pub async fn expect_with(
    h: &mut ApiHandle,
    method: &str,
    uri: &str,
    status: u16,
    reply: impl FnOnce(&Value) -> Value,
) -> Seen {
    let (req, send) = tokio::time::timeout(std::time::Duration::from_secs(60), h.next_request())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {method} {uri}"))
        .unwrap_or_else(|| panic!("client went away before {method} {uri}"));
    let seen_method = req.method().to_string();
    let seen_uri = req.uri().to_string();
    let ct =
        req.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let bytes = req.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    assert_eq!((seen_method.as_str(), seen_uri.as_str()), (method, uri), "unexpected request, body {body}");
    let reply = reply(&body);
    send.send_response(
        Response::builder().status(status).body(Body::from(serde_json::to_vec(&reply).unwrap())).unwrap(),
    );
    Seen { method: seen_method, uri: seen_uri, content_type: ct, body }
}

/// A `metav1.Status` failure body.
pub fn status_err(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("scripted {reason}"), "reason": reason, "code": code})
}

/// A Node.
pub fn node(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels}})
}

/// A list of `kind`.
pub fn list(api_version: &str, kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": items})
}

/// What the API server returns for an apply of `body` to `name`: the object as sent, with
/// name, resourceVersion and a spec.
pub fn applied(name: &str, spec: Value) -> impl FnOnce(&Value) -> Value {
    let name = name.to_string();
    move |body: &Value| {
        let mut r = body.clone();
        r["metadata"]["name"] = json!(name);
        r["metadata"]["resourceVersion"] = json!("7");
        if r.get("spec").is_none() {
            r["spec"] = spec;
        }
        r
    }
}
