//! Reading GitHub's answers without the network: a refusal's status, headers and body made a
//! [`ForgeError`], a `Link` header's next page, a failed request's cause, and the encoding of
//! path segments and query values.

use http::HeaderMap;

use crate::ForgeError;

/// How long to wait when a rate limit says nothing about when it ends.
const DEFAULT_RETRY_AFTER_SECS: u64 = 60;

/// The error for a non-success answer to the call that asked for `what`, `now_unix` seconds
/// after the epoch (rate limits say when they reset as an epoch time).
pub(crate) fn refusal(
    what: &str,
    status: u16,
    headers: &HeaderMap,
    body: &str,
    now_unix: u64,
) -> ForgeError {
    let message = format!("{what}: {}", github_message(status, body));
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    match status {
        401 => ForgeError::Credential(format!(
            "GitHub refused the credential ({message}); log in again with `gh auth login`, or set \
             GH_TOKEN or GITHUB_TOKEN"
        )),
        403 | 429 => {
            if header("x-ratelimit-remaining") == Some("0") {
                let retry_after_secs = header("x-ratelimit-reset")
                    .and_then(|reset| reset.parse::<u64>().ok())
                    .map_or(DEFAULT_RETRY_AFTER_SECS, |reset| {
                        reset.saturating_sub(now_unix)
                    })
                    .max(1);
                return ForgeError::RateLimited {
                    retry_after_secs,
                    message,
                };
            }
            if let Some(after) = header("retry-after") {
                return ForgeError::RateLimited {
                    retry_after_secs: after
                        .parse::<u64>()
                        .unwrap_or(DEFAULT_RETRY_AFTER_SECS)
                        .max(1),
                    message,
                };
            }
            let lower = message.to_lowercase();
            if status == 429 || lower.contains("secondary rate limit") || lower.contains("abuse") {
                return ForgeError::RateLimited {
                    retry_after_secs: DEFAULT_RETRY_AFTER_SECS,
                    message,
                };
            }
            ForgeError::Refused { status, message }
        }
        404 => ForgeError::NotFound(what.to_string()),
        300..=399 => {
            let to = header("location").unwrap_or("elsewhere");
            ForgeError::Refused {
                status,
                message: format!("{what}: GitHub answered that it moved, to {to}"),
            }
        }
        400..=499 => ForgeError::Refused { status, message },
        500..=599 => ForgeError::Server { status, message },
        _ => ForgeError::BadAnswer(format!("{what}: GitHub answered with status {status}")),
    }
}

/// GitHub's `message` and its `errors[]` (each its `message`, or its resource, field and code),
/// joined; the start of a body that is not GitHub's error shape; or the status's reason.
fn github_message(status: u16, body: &str) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        errors: Option<Vec<serde_json::Value>>,
    }
    let reason = || {
        http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("no reason given")
            .to_string()
    };
    let Ok(parsed) = serde_json::from_str::<ErrorBody>(body) else {
        let start = cut_at_char_boundary(body.trim(), 300);
        return if start.is_empty() {
            reason()
        } else {
            start.to_string()
        };
    };
    let mut text = parsed
        .message
        .filter(|m| !m.is_empty())
        .unwrap_or_else(reason);
    let details: Vec<String> = parsed
        .errors
        .unwrap_or_default()
        .iter()
        .filter_map(error_detail)
        .collect();
    if !details.is_empty() {
        text.push_str(": ");
        text.push_str(&details.join("; "));
    }
    text
}

/// One entry of GitHub's `errors` array (a string, or an object with a message or a code).
fn error_detail(error: &serde_json::Value) -> Option<String> {
    if let Some(text) = error.as_str() {
        return Some(text.to_string());
    }
    let field = |name: &str| {
        error
            .get(name)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    if let Some(message) = field("message") {
        return Some(match field("code") {
            Some(code) if code != "custom" => format!("{message} ({code})"),
            _ => message.to_string(),
        });
    }
    let code = field("code")?;
    Some(match (field("resource"), field("field")) {
        (Some(resource), Some(name)) => format!("{resource}.{name}: {code}"),
        (None, Some(name)) => format!("{name}: {code}"),
        _ => code.to_string(),
    })
}

/// The `rel="next"` address of a `Link` header, if it has one.
pub(crate) fn next_link(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(next_in_link)
}

/// The `rel="next"` address in one `Link` value: `<url>; rel="next", <url>; rel="last"`. The
/// addresses are read between `<` and `>` (they may hold commas, never angle brackets).
pub(crate) fn next_in_link(value: &str) -> Option<String> {
    let mut rest = value;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after.find('>')?;
        let url = &after[..close];
        let params_end = after[close..].find('<').map_or(after.len(), |i| close + i);
        // The parameters, without the comma before the next link.
        let params = after[close + 1..params_end].trim().trim_end_matches(',');
        let is_next = params.split(';').any(|param| {
            let Some((key, value)) = param.split_once('=') else {
                return false;
            };
            key.trim().eq_ignore_ascii_case("rel")
                && value
                    .trim()
                    .trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|rel| rel.eq_ignore_ascii_case("next"))
        });
        if is_next {
            return Some(url.trim().to_string());
        }
        rest = &after[params_end..];
    }
    None
}

/// `url` (a next page's address) as a path and query below the API's base (`base_path`, such as
/// `/api/v3`, or empty), if it is on the same scheme and host: the credential goes nowhere else.
pub(crate) fn below_base(url: &str, base: &http::Uri, base_path: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    if let Some(authority) = uri.authority()
        && (Some(authority) != base.authority() || uri.scheme() != base.scheme())
    {
        return None;
    }
    let path_and_query = uri.path_and_query()?.as_str();
    let below = match path_and_query.strip_prefix(base_path) {
        Some(below) if !base_path.is_empty() => below,
        _ => path_and_query,
    };
    below.starts_with('/').then(|| below.to_string())
}

/// `text` percent-encoded for a path segment or a query value: everything but the unreserved
/// characters (letters, digits, `-`, `.`, `_`, `~`) is escaped, so `/`, `:`, `,`, `&`, `#` and
/// spaces stay inside their segment or value.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn cut_at_char_boundary(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` bounded to `max` bytes (cut on a character boundary), saying so when it was cut.
pub(crate) fn bounded(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let note = format!("\n[cut: {} bytes in all, the first ones shown]", text.len());
    let kept = cut_at_char_boundary(&text, max.saturating_sub(note.len()));
    format!("{kept}{note}")
}

/// The error for a request that got no answer: a timeout (the connection's or ours) or a
/// transport failure, with the causes (which never hold the credential) joined.
pub(crate) fn unanswered(what: &str, error: &octocrab::Error) -> ForgeError {
    let mut causes = Vec::new();
    let mut timed_out = false;
    // octocrab's own Display of a few variants holds a backtrace: only its causes are shown.
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
        }
        let text = e.to_string();
        timed_out |= text.contains("timed out") || text.contains("deadline has elapsed");
        if !causes.iter().any(|c: &String| c.contains(&text)) {
            causes.push(text);
        }
        cause = e.source();
    }
    if causes.is_empty() {
        causes.push(octocrab_error_kind(error).to_string());
    }
    let causes = causes.join(": ");
    if timed_out {
        ForgeError::Timeout(format!("{what}: {causes}"))
    } else {
        ForgeError::Transport(format!("{what}: {causes}"))
    }
}

/// A word for an octocrab error without a cause (its Display may hold a backtrace).
fn octocrab_error_kind(error: &octocrab::Error) -> &'static str {
    match error {
        octocrab::Error::Service { .. } => "the HTTP client failed",
        octocrab::Error::Hyper { .. } => "the connection failed",
        octocrab::Error::Http { .. } | octocrab::Error::Uri { .. } => "the request was malformed",
        _ => "the request failed",
    }
}
