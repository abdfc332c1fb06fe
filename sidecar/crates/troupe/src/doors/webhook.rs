//! The forge's webhook receiver: `POST /webhook` (or `/`) on the loopback address of the
//! person's `[forge] webhook_listen` (a tunnel the person runs forwards the forge to it). A
//! delivery is the person's only by its signature: `X-Hub-Signature-256`, HMAC-SHA256 of the
//! exact body under the shared secret of `[forge] webhook_secret_file` (a private file),
//! compared in constant time; anything unsigned or signed otherwise is refused before its body
//! is read as JSON. The event then goes to `receive_forge_event`, which refuses a delivery id
//! seen before (a replay). No other operation is reachable here.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Weak};

use axum::response::IntoResponse;
use hmac::{KeyInit, Mac};
use http::{HeaderMap, StatusCode};
use troupe_core::daemon::Daemon;

/// GitHub caps a delivery's payload at 25 MB.
const MAX_BODY: usize = 25 * 1024 * 1024;

/// Reads the shared secret: a file only its owner may read, one line.
pub fn read_secret(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("the webhook secret {}: {e}", path.display()))?;
    if meta.mode() & 0o077 != 0 {
        anyhow::bail!(
            "the webhook secret {} is readable by others (mode {:o}): chmod 600 it",
            path.display(),
            meta.mode() & 0o777
        );
    }
    let text = std::fs::read_to_string(path)?;
    let secret = text.trim().as_bytes().to_vec();
    if secret.len() < 16 {
        anyhow::bail!(
            "the webhook secret {} is shorter than 16 bytes",
            path.display()
        );
    }
    Ok(secret)
}

/// Whether `signature` (`sha256=<hex>`) is `body`'s under `secret`.
pub fn signed(secret: &[u8], body: &[u8], signature: &str) -> bool {
    let Some(hex) = signature.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Some(expected) = unhex(hex) else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Serves the receiver on `addr` until the daemon stops.
pub async fn serve(
    daemon: Weak<Daemon>,
    addr: SocketAddr,
    secret: Vec<u8>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("the webhook receiver cannot listen on {addr}: {e}"))?;
    tracing::info!(%addr, "the forge's webhook receiver listens");
    let secret: Arc<[u8]> = secret.into();
    let handle = move |headers: HeaderMap, body: axum::body::Bytes| {
        let (daemon, secret) = (daemon.clone(), secret.clone());
        async move { receive(daemon, &secret, headers, body).await }
    };
    let app = axum::Router::new()
        .route("/", axum::routing::post(handle.clone()))
        .route("/webhook", axum::routing::post(handle))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY));
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
        })
        .await?;
    Ok(())
}

fn json(status: StatusCode, v: &serde_json::Value) -> axum::response::Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

async fn receive(
    daemon: Weak<Daemon>,
    secret: &[u8],
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let refuse = |status: StatusCode, why: &str| json(status, &serde_json::json!({ "error": why }));
    let Some(signature) = header(&headers, "x-hub-signature-256") else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "no X-Hub-Signature-256: set the webhook's secret",
        );
    };
    if !signed(secret, &body, signature) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "the signature does not match this receiver's secret",
        );
    }
    let (Some(event), Some(delivery)) = (
        header(&headers, "x-github-event"),
        header(&headers, "x-github-delivery"),
    ) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "a delivery needs X-GitHub-Event and X-GitHub-Delivery",
        );
    };
    let payload: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!(
                    "the body is not JSON (set the webhook's content type to application/json): {e}"
                ),
            );
        }
    };
    let Some(d) = daemon.upgrade() else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "the daemon is stopping");
    };
    let Some(handler) = troupe_core::registry::handler("receive_forge_event") else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "receive_forge_event is missing",
        );
    };
    let params = serde_json::json!({ "event": event, "delivery_id": delivery, "payload": payload });
    let caller = troupe_core::Caller::Person {
        door: "webhook".into(),
    };
    match handler(d, caller, Some(params)).await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => {
            let status = match &e {
                troupe_api::ApiError::Conflict(_) => StatusCode::CONFLICT,
                troupe_api::ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                troupe_api::ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            };
            refuse(status, &e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_body_under_the_secret_is_signed() {
        // GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!".
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(signed(b"It's a Secret to Everybody", b"Hello, World!", sig));
        assert!(!signed(
            b"It's a Secret to Everybody",
            b"Hello, World?",
            sig
        ));
        assert!(!signed(b"another secret", b"Hello, World!", sig));
        assert!(!signed(
            b"It's a Secret to Everybody",
            b"Hello, World!",
            "sha1=00"
        ));
        assert!(!signed(
            b"It's a Secret to Everybody",
            b"Hello, World!",
            "sha256=zz"
        ));
    }
}
