//! A minimal LSP client over a child `troupe lsp`'s stdio (Content-Length framing), used by
//! `troupe-dev bench approvals` and by the tests to drive the editor door like an editor would.

use std::process::Stdio;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

use troupe_api::layout::Layout;

/// A running `troupe lsp` and the client end of its stdio.
pub struct LspClient {
    child: tokio::process::Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: i64,
}

impl LspClient {
    /// Sends one message.
    pub async fn send(&mut self, msg: Value) -> anyhow::Result<()> {
        let body = serde_json::to_vec(&msg)?;
        self.stdin
            .write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
            .await?;
        self.stdin.write_all(&body).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Sends a request; returns its id.
    pub async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<i64> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await?;
        Ok(id)
    }

    /// Reads the next message (`TROUPE_BENCH_TRACE` prints each).
    pub async fn read(&mut self) -> anyhow::Result<Value> {
        let v = self.read_inner().await?;
        if std::env::var_os("TROUPE_BENCH_TRACE").is_some() {
            eprintln!("<- {v}");
        }
        Ok(v)
    }

    async fn read_inner(&mut self) -> anyhow::Result<Value> {
        let mut len = None;
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).await? == 0 {
                bail!("troupe lsp closed its output");
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("Content-Length: ") {
                len = Some(v.parse::<usize>()?);
            }
        }
        let mut body = vec![0; len.context("a message without Content-Length")?];
        self.stdout.read_exact(&mut body).await?;
        Ok(serde_json::from_slice(&body)?)
    }

    /// Reads until `pred` matches a message (answering the server's own requests on the way).
    pub async fn until(&mut self, mut pred: impl FnMut(&Value) -> bool) -> anyhow::Result<Value> {
        loop {
            let msg = self.read().await?;
            if pred(&msg) {
                return Ok(msg);
            }
            if msg.get("method").is_some() && msg.get("id").is_some() {
                let id = msg["id"].clone();
                self.send(json!({ "jsonrpc": "2.0", "id": id, "result": null }))
                    .await?;
            }
        }
    }
}

impl LspClient {
    /// Starts `bin lsp` for `layout` and completes the initialize handshake with `root` as
    /// the workspace folder.
    pub async fn start(
        bin: &std::path::Path,
        layout: &Layout,
        root: &std::path::Path,
        log: &str,
    ) -> anyhow::Result<LspClient> {
        Self::start_with_env(bin, layout, root, log, &[]).await
    }

    /// `start`, with extra environment (a member's `TROUPE_RUN_TOKEN`, say).
    pub async fn start_with_env(
        bin: &std::path::Path,
        layout: &Layout,
        root: &std::path::Path,
        log: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<LspClient> {
        let mut child = tokio::process::Command::new(bin)
            .arg("lsp")
            .envs(env.iter().copied())
            .env("TROUPE_HOME", &layout.data_dir)
            .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
            .env("TROUPE_LOG", log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start troupe lsp")?;
        let mut lsp = LspClient {
            stdin: child.stdin.take().context("no stdin")?,
            stdout: BufReader::new(child.stdout.take().context("no stdout")?),
            next_id: 0,
            child,
        };
        let uri = format!("file://{}", root.display());
        let init = lsp
            .request(
                "initialize",
                json!({ "processId": null, "rootUri": uri, "capabilities": {},
                    "workspaceFolders": [{ "uri": uri, "name": "workspace" }] }),
            )
            .await?;
        lsp.until(|m| m["id"] == init).await?;
        lsp.send(json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }))
            .await?;
        Ok(lsp)
    }

    /// Asks the server to shut down and waits for it to exit.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let id = self.request("shutdown", Value::Null).await?;
        self.until(|m| m["id"] == id).await?;
        self.send(json!({ "jsonrpc": "2.0", "method": "exit" }))
            .await?;
        self.child.wait().await?;
        Ok(())
    }
}
