//! What both sides of the Agent Client Protocol share, the runner's client role
//! (`runners/acp/adapter.rs`) and `troupe acp`'s agent role (the door): the line transport (a
//! message a line; the peer's invalid UTF-8 replaced, not fatal) and the kinds of answer to a
//! permission request. Neither side imports the other.

use std::pin::Pin;

use tokio::io::AsyncBufReadExt;

/// The kinds of answer to a permission request (the option ids differ per agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

/// Our messages to the peer, a line each (the runner's to its agent, `troupe acp`'s to its
/// editor). Closing it shuts the agent's stdin (as the crate's
/// own writer does; an unfold sink could not forward the close).
pub struct LineSink<W> {
    out: Pin<Box<W>>,
    pending: Vec<u8>,
    written: usize,
}

pub fn line_sink<W: tokio::io::AsyncWrite>(out: W) -> LineSink<W> {
    LineSink {
        out: Box::pin(out),
        pending: Vec::new(),
        written: 0,
    }
}

impl<W: tokio::io::AsyncWrite> futures_util::Sink<String> for LineSink<W> {
    type Error = std::io::Error;

    fn poll_ready(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }

    fn start_send(self: Pin<&mut Self>, line: String) -> std::io::Result<()> {
        let this = self.get_mut();
        this.pending = line.into_bytes();
        this.pending.push(b'\n');
        this.written = 0;
        Ok(())
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        while this.written < this.pending.len() {
            let n = std::task::ready!(
                this.out
                    .as_mut()
                    .poll_write(cx, &this.pending[this.written..])
            )?;
            if n == 0 {
                return std::task::Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            this.written += n;
        }
        this.pending.clear();
        this.written = 0;
        this.out.as_mut().poll_flush(cx)
    }

    fn poll_close(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::ready!(self.as_mut().poll_flush(cx))?;
        self.get_mut().out.as_mut().poll_shutdown(cx)
    }
}

/// The peer's output (the agent's, or the editor's for `troupe acp`), a line at a time, invalid
/// UTF-8 replaced: the crate's own reader ends
/// the session at the first byte that is not UTF-8, where any other malformed line is skipped
/// (found by fuzzing; `adapter/fuzz_tests.rs` keeps the case).
pub fn lossy_lines<R: tokio::io::AsyncRead + Send + 'static>(
    input: R,
) -> impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static {
    let reader = Some(tokio::io::BufReader::new(Box::pin(input)));
    Box::pin(futures_util::stream::unfold(reader, async |reader| {
        let mut reader = reader?;
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) => None,
            Ok(_) => {
                while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    line.pop();
                }
                let line = String::from_utf8(line)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
                Some((Ok(line), Some(reader)))
            }
            // A read error ends the stream (the crate reports the transport closed).
            Err(e) => Some((Err(e), None)),
        }
    }))
}
