//! Errors: [`ApiError`] is what the API server answers (a `metav1.Status`
//! body), [`StartError`] is why an emulator could not start.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::resources::ResourceType;

/// A failed API call, as the real API server reports it: an HTTP code and a
/// `metav1.Status` body (`kind: Status`, `reason`, `code`, `details`).
///
/// The store's test-facing methods return it too, so a test sees the same
/// error a client would (e.g. `409 AlreadyExists`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (404, 409, ...).
    pub code: u16,
    /// `metav1.StatusReason` (`NotFound`, `Conflict`, `Expired`, ...).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details`, when the error is about one object.
    pub details: Option<Box<ErrorDetails>>,
    /// `details.retryAfterSeconds` (429, 503) and the `Retry-After` header.
    pub retry_after_seconds: Option<u32>,
}

/// `metav1.StatusDetails` of an error about one object.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorDetails {
    /// The object's name.
    pub name: String,
    /// Its API group (`""` for core).
    pub group: String,
    /// The resource's plural, as the real server sets `details.kind`.
    pub kind: String,
}

impl ApiError {
    /// An error with the given code, reason and message and no details.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None, retry_after_seconds: None }
    }

    /// Sets `details` (name, group, plural) from the resource.
    fn about(mut self, ty: &ResourceType, name: &str) -> Self {
        self.details = Some(Box::new(ErrorDetails {
            name: name.to_string(),
            group: ty.group.clone(),
            kind: ty.plural.clone(),
        }));
        self
    }

    /// `404 NotFound`: `<plural>.<group> "<name>" not found`.
    pub fn not_found(ty: &ResourceType, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", ty.group_resource())).about(ty, name)
    }

    /// `404 NotFound` for a path that names no resource.
    pub fn no_route() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
    }

    /// `409 AlreadyExists`.
    pub fn already_exists(ty: &ResourceType, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", ty.group_resource()))
            .about(ty, name)
    }

    /// `409 Conflict`: a stale `resourceVersion` or a failed precondition.
    pub fn conflict(ty: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", ty.group_resource()),
        )
        .about(ty, name)
    }

    /// `409 Conflict` for a stale `metadata.resourceVersion`.
    pub fn stale(ty: &ResourceType, name: &str) -> Self {
        Self::conflict(
            ty,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `400 BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// `422 Invalid` about one object.
    pub fn invalid(ty: &ResourceType, name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(422, "Invalid", format!("{} \"{name}\" is invalid: {message}", ty.group_resource()))
            .about(ty, name)
    }

    /// `405 MethodNotAllowed`.
    pub fn method_not_allowed(method: &http::Method) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow the method {method} on this resource"),
        )
    }

    /// `406 NotAcceptable` for an `Accept` header the emulator cannot serve.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only application/json (optionally as=PartialObjectMetadata[List]) is served, not {accept:?}"
            ),
        )
    }

    /// `415 UnsupportedMediaType` for a PATCH content type.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type:?})"))
    }

    /// `410 Expired`: the watch's `resourceVersion` is older than the
    /// retained event window.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {requested} ({oldest})"))
    }

    /// `401 Unauthorized`.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// `403 Forbidden` for an anonymous request to a non-public path.
    pub fn forbidden_anonymous(path: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("forbidden: User \"system:anonymous\" cannot get path \"{path}\""),
        )
    }

    /// An error with `code` and the reason the real server gives that code.
    pub fn from_code(code: u16, message: impl Into<String>) -> Self {
        Self::new(code, reason_for(code), message)
    }

    /// The `metav1.Status` JSON body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = serde_json::Map::new();
        if let Some(d) = &self.details {
            details.insert("name".into(), json!(d.name));
            if !d.group.is_empty() {
                details.insert("group".into(), json!(d.group));
            }
            details.insert("kind".into(), json!(d.kind));
        }
        if let Some(secs) = self.retry_after_seconds {
            details.insert("retryAfterSeconds".into(), json!(secs));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// `metav1.StatusReason` for an HTTP code, as `k8s.io/apimachinery`'s
/// `NewGenericServerResponse` chooses it.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// Why an emulator did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("binding {addr}")]
    Bind {
        /// Requested address.
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Certificate generation or the rustls configuration failed.
    #[error("setting up TLS: {0}")]
    Tls(String),
    /// The kubeconfig could not be written.
    #[error("writing kubeconfig {path}")]
    Kubeconfig {
        /// Where it was to be written.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A seed file could not be read.
    #[error("reading seed file {path}")]
    SeedRead {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A seed document is not valid YAML/JSON or not an object.
    #[error("seed {origin}, document {index}: {message}")]
    SeedParse {
        /// File name or `inline`.
        origin: String,
        /// 0-based document index.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A seed object was refused by the store.
    #[error("seed {origin}, document {index}")]
    SeedObject {
        /// File name or `inline`.
        origin: String,
        /// 0-based document index.
        index: usize,
        /// The refusal.
        #[source]
        source: ApiError,
    },
    /// The background runtime thread could not be started.
    #[error("starting the emulator's runtime thread")]
    Runtime(#[source] std::io::Error),
}
