//! `troupe lsp`'s input, re-framed before tower-lsp-server reads it. The crate's reader stops
//! for good at the first frame it cannot decode (a body that is not a JSON-RPC message, a
//! header it does not know, three headers), and `troupe lsp` then exited: found by fuzzing
//! (`tests/it/fuzz.rs`). Here each frame is read by its own `Content-Length`, checked, and passed
//! on with that one header; a frame that would not decode is logged to stderr and skipped, so
//! the editor's next message is still served.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tower_lsp_server::jsonrpc::{Request, Response};

/// The largest message passed on; a larger one is read past and skipped.
pub const MAX_BODY: usize = 64 << 20;
/// The most header bytes one frame may have.
const MAX_HEADER: u64 = 8 << 10;

/// What the server reads instead of `input`: only frames it can decode.
pub fn reframe<R>(input: R) -> tokio::io::DuplexStream
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (server_side, mut ours) = tokio::io::duplex(64 << 10);
    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        loop {
            match next_frame(&mut input).await {
                Frame::End => break,
                Frame::Skip(why) => tracing::warn!("skipped a message from the editor: {why}"),
                Frame::Body(body) => match check(&body) {
                    Err(why) => tracing::warn!("skipped a message from the editor: {why}"),
                    Ok(()) => {
                        let head = format!("Content-Length: {}\r\n\r\n", body.len());
                        if ours.write_all(head.as_bytes()).await.is_err()
                            || ours.write_all(&body).await.is_err()
                        {
                            break; // the server has stopped
                        }
                    }
                },
            }
        }
        // Dropping our end is the end of input for the server.
    });
    server_side
}

#[derive(Debug, PartialEq)]
enum Frame {
    Body(Vec<u8>),
    Skip(String),
    End,
}

async fn next_frame<R: AsyncRead + Unpin>(input: &mut BufReader<R>) -> Frame {
    let mut length: Option<Result<usize, String>> = None;
    let mut seen = 0u64;
    loop {
        let mut line = Vec::new();
        match (&mut *input)
            .take(MAX_HEADER)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return Frame::End,
            Ok(n) => seen += n as u64,
        }
        while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            line.pop();
        }
        if line.is_empty() {
            if length.is_none() && seen <= 2 {
                seen = 0;
                continue; // a stray blank line between frames
            }
            break;
        }
        if seen > MAX_HEADER {
            // Not a header block: skip to the next blank line.
            length = Some(Err("a header block over 8 KiB".into()));
            continue;
        }
        let line = String::from_utf8_lossy(&line);
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = Some(
                value
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| format!("Content-Length {:?} is not a length", value.trim())),
            );
        }
    }
    let length = match length {
        Some(Ok(n)) => n,
        Some(Err(why)) => return Frame::Skip(why),
        None => return Frame::Skip("a message without Content-Length".into()),
    };
    if length > MAX_BODY {
        let skipped = tokio::io::copy(
            &mut (&mut *input).take(length as u64),
            &mut tokio::io::sink(),
        )
        .await
        .unwrap_or(0);
        if skipped < length as u64 {
            return Frame::End;
        }
        return Frame::Skip(format!(
            "a message of {length} bytes (the limit is {MAX_BODY})"
        ));
    }
    let mut body = vec![0; length];
    match input.read_exact(&mut body).await {
        Ok(_) => Frame::Body(body),
        Err(_) => Frame::End,
    }
}

/// Whether tower-lsp-server can decode `body` (a JSON-RPC request, notification or response).
fn check(body: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("the body is not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Err("an empty body".into());
    }
    let request = serde_json::from_str::<Request>(text);
    if request.is_ok() || serde_json::from_str::<Response>(text).is_ok() {
        return Ok(());
    }
    Err(match request {
        Err(e) => format!("not a JSON-RPC message: {e}"),
        Ok(_) => "not a JSON-RPC message".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(raw: &[u8]) -> Vec<Frame> {
        let mut input = BufReader::new(raw);
        let mut out = Vec::new();
        loop {
            match next_frame(&mut input).await {
                Frame::End => return out,
                f => out.push(f),
            }
        }
    }

    #[tokio::test]
    async fn frames_are_read_by_their_length_and_bad_ones_skipped() {
        let raw = b"Content-Length: 2\r\n\r\n{}\r\nX-Other: 1\r\ncontent-length: 3\r\nContent-Type: text/plain\r\n\r\nabcContent-Type: a\r\n\r\nContent-Length: x\r\n\r\nContent-Length: 1\r\n\r\nz";
        assert_eq!(
            frames(raw).await,
            vec![
                Frame::Body(b"{}".to_vec()),
                Frame::Body(b"abc".to_vec()),
                Frame::Skip("a message without Content-Length".into()),
                Frame::Skip("Content-Length \"x\" is not a length".into()),
                Frame::Body(b"z".to_vec()),
            ]
        );
        assert!(check(br#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#).is_ok());
        assert!(check(br#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#).is_ok());
        assert!(check(br#"{"jsonrpc":"2.0","id":1,"result":null}"#).is_ok());
        // Found by the fuzz target: a body like this ended `troupe lsp`.
        assert!(check(br#"{"jsonrpc":"2.0","method":"register_session","id":[]}"#).is_err());
        assert!(check(b"\xff").is_err());
    }

    /// Found by the fuzz target: a pending request on line 2^32 overflowed the range's
    /// arithmetic (a panic in debug builds, a wrapped line in release).
    #[test]
    fn lines_past_u32_are_the_last_line() {
        let r = super::super::range_of(&serde_json::json!({
            "start_line": 4_294_967_296u64, "end_line": 0
        }));
        assert_eq!((r.start.line, r.end.line), (u32::MAX, u32::MAX));
        let r = super::super::range_of(&serde_json::json!({ "start_line": 3, "end_line": 5 }));
        assert_eq!((r.start.line, r.end.line), (2, 4));
    }
}
