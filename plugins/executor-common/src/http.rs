//! HTTP for the executors: one blocking JSON POST over `wasi:http/outgoing-handler`, and the
//! wall clock. It never sets an authorization header: the host injects the provider's key.

use std::io::{Read, Write};

use serde_json::Value;
use wasi::http::outgoing_handler;
use wasi::http::types::{
    Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};

/// The largest response body read before giving up.
const MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;
/// How many characters of a body an error message quotes.
const EXCERPT_CHARS: usize = 300;
/// The longest a connection may take to open.
const CONNECT_TIMEOUT_MS: u64 = 30_000;

/// Unix time in milliseconds, from `wasi:clocks/wall-clock`.
pub fn now_ms() -> u64 {
    let now = wasi::clocks::wall_clock::now();
    now.seconds
        .saturating_mul(1000)
        .saturating_add(u64::from(now.nanoseconds / 1_000_000))
}

/// The parts of an `http(s)://authority/path?query` URL that `wasi:http` wants.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Url {
    https: bool,
    authority: String,
    path_with_query: String,
}

pub(crate) fn parse_url(url: &str) -> Result<Url, String> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(format!("URL {url:?} must start with https:// or http://"));
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.is_empty() || authority.contains('@') {
        return Err(format!("URL {url:?} has no usable host"));
    }
    let path_with_query = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok(Url {
        https,
        authority: authority.to_string(),
        path_with_query,
    })
}

/// `base` (with or without a trailing slash) followed by `path` (which starts with `/`).
pub fn join_url(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

/// At most `EXCERPT_CHARS` characters of `text` on one line, for error messages.
pub fn excerpt(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(EXCERPT_CHARS + 1)
        .collect();
    if one_line.chars().count() > EXCERPT_CHARS {
        let cut: String = one_line.chars().take(EXCERPT_CHARS).collect();
        format!("{}…", cut.trim_end())
    } else {
        one_line.trim().to_string()
    }
}

/// POSTs `body` as JSON to `url` with `headers` and returns the parsed JSON response.
///
/// Errors name the URL and say what went wrong: the host refused or failed the request, a
/// non-2xx status (with a short excerpt of the body), or a body that is not JSON. Timeouts
/// are set so the request gives up at `deadline_ms` (Unix milliseconds).
pub fn post_json(
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
    deadline_ms: u64,
) -> Result<Value, String> {
    let bytes = serde_json::to_vec(body).map_err(|e| format!("cannot encode request: {e}"))?;
    let (status, response) = post(url, headers, &bytes, deadline_ms)?;
    let text = String::from_utf8_lossy(&response);
    if !(200..300).contains(&status) {
        return Err(format!("HTTP {status} from {url}: {}", excerpt(&text)));
    }
    serde_json::from_slice(&response).map_err(|e| {
        format!(
            "unparseable response from {url}: not JSON ({e}); body starts: {}",
            excerpt(&text)
        )
    })
}

/// One blocking request: returns the status and the whole body.
fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    deadline_ms: u64,
) -> Result<(u16, Vec<u8>), String> {
    let target = parse_url(url)?;
    let fail = |what: &str| format!("request to {url} failed: {what}");

    let mut entries: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    entries.push((
        "content-length".to_string(),
        body.len().to_string().into_bytes(),
    ));
    let fields = Fields::from_list(&entries).map_err(|e| fail(&format!("bad header: {e:?}")))?;

    let request = OutgoingRequest::new(fields);
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    request
        .set_method(&Method::Post)
        .and_then(|()| request.set_scheme(Some(&scheme)))
        .and_then(|()| request.set_authority(Some(&target.authority)))
        .and_then(|()| request.set_path_with_query(Some(&target.path_with_query)))
        .map_err(|()| fail("the host refused the URL"))?;

    // Give up at the deadline; the host clamps these further.
    let remaining_ns = deadline_ms
        .saturating_sub(now_ms())
        .max(1)
        .saturating_mul(1_000_000);
    let options = RequestOptions::new();
    // A host that does not support a timeout says so with Err; the deadline check between
    // turns still holds then.
    let _ = options.set_connect_timeout(Some(remaining_ns.min(CONNECT_TIMEOUT_MS * 1_000_000)));
    let _ = options.set_first_byte_timeout(Some(remaining_ns));
    let _ = options.set_between_bytes_timeout(Some(remaining_ns));

    let outgoing = request.body().map_err(|()| fail("no request body"))?;
    // Send first, then stream the body: writing a large body before `handle` could fill the
    // host's buffer with nobody reading it.
    let future =
        outgoing_handler::handle(request, Some(options)).map_err(|e| fail(&e.to_string()))?;
    // No flush after the last write: once the host has read `content-length` bytes it may
    // close the stream, and a flush then fails although every byte went out. A write that
    // fails only matters if no response comes (a server may answer before reading it all).
    let written = match outgoing.write() {
        Ok(mut stream) => stream.write_all(body).map_err(|e| e.to_string()),
        Err(()) => Err("no request body stream".to_string()),
    };
    let finished = OutgoingBody::finish(outgoing, None).map_err(|e| e.to_string());
    let sent = written.and(finished);

    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(e))) => {
            let also = sent.err().map(|w| format!(" (sending the body: {w})"));
            return Err(fail(&format!("{e}{}", also.unwrap_or_default())));
        }
        Some(Err(())) => return Err(fail("response already taken")),
        None => return Err(fail("no response")),
    };
    let status = response.status();
    let incoming = response.consume().map_err(|()| fail("no response body"))?;
    let mut data = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| fail("no response body stream"))?;
        stream
            .take(MAX_RESPONSE_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(|e| fail(&format!("reading the body: {e}")))?;
    }
    drop(IncomingBody::finish(incoming));
    if data.len() as u64 > MAX_RESPONSE_BYTES {
        return Err(fail(&format!(
            "response body larger than {MAX_RESPONSE_BYTES} bytes"
        )));
    }
    Ok((status, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_and_path() {
        assert_eq!(
            parse_url("https://api.openai.com/v1/chat/completions"),
            Ok(Url {
                https: true,
                authority: "api.openai.com".into(),
                path_with_query: "/v1/chat/completions".into()
            })
        );
        assert_eq!(
            parse_url("http://localhost:11434"),
            Ok(Url {
                https: false,
                authority: "localhost:11434".into(),
                path_with_query: "/".into()
            })
        );
        assert_eq!(
            parse_url("http://h?x=1").map(|u| u.path_with_query),
            Ok("/?x=1".to_string())
        );
        assert!(parse_url("ftp://x/").is_err());
        assert!(parse_url("https:///v1").is_err());
        assert_eq!(
            join_url("https://api.openai.com/v1/", "/chat/completions"),
            "https://api.openai.com/v1/chat/completions"
        );
    }

    #[test]
    fn excerpts_are_short_and_on_one_line() {
        assert_eq!(excerpt(" a\nb "), "a b");
        let long = "é".repeat(400);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
