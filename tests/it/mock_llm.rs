//! A mock LLM provider on loopback: answers OpenAI Chat Completions, Anthropic Messages, OpenAI
//! Responses and Google Gemini `generateContent` requests, plain or streamed (SSE), in the
//! providers' real wire formats, from a script.
//!
//! `MockLlm::start(script)` binds `127.0.0.1:0` and serves HTTP/1.1 (hyper, keep-alive, chunked or
//! `Content-Length` request bodies) from a current-thread tokio runtime on its own thread, so plain
//! `#[test]` functions can use it; dropping it stops the server and closes open connections.
//!
//! Every request to a model endpoint takes the next [`Reply`] of the script, in order and shared
//! across endpoints; once the script is used up each one is answered with the text
//! [`EXHAUSTED_TEXT`]. Every request is recorded — model calls, token counts and 404s alike —
//! *before* it is answered, so a client that has its answer always finds its request in
//! [`MockLlm::requests`].
//!
//! | Endpoint | Takes a script entry | Answer |
//! |---|---|---|
//! | `POST /v1/chat/completions`, `/chat/completions` | yes | `chat.completion`, or `chat.completion.chunk` SSE with `"stream": true` |
//! | `POST /v1/messages`, `/messages` | yes | Anthropic `message`, or its SSE event sequence with `"stream": true` |
//! | `POST /v1/messages/count_tokens`, `/messages/count_tokens` | no | `{"input_tokens": COUNT_TOKENS}` |
//! | `POST /v1/responses`, `/responses` | yes | `response`, or its SSE event sequence with `"stream": true` |
//! | `POST /v1beta/models/{model}:generateContent` | yes | Gemini `GenerateContentResponse` |
//! | `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` | yes | `GenerateContentResponse` chunks as SSE `data:` events (a JSON array of them without `alt=sse`) |
//! | `POST /v1beta/models/{model}:countTokens` | no | `{"totalTokens": COUNT_TOKENS}` |
//! | anything else | no | 404, `{"type":"error","error":{"type":"not_found_error",…,"path":…}}` |
//!
//! Matching ignores the query string (Claude Code posts to `/v1/messages?beta=true`), except for
//! Gemini's `alt=sse`. The Gemini paths may also start `/v1/` (Vertex AI's version) instead of
//! `/v1beta/`; the model named in the path is the one the answer names. Claude Code also sends
//! `HEAD /` before its first call: it gets a 404 and is recorded, like any other request.
//! Usage is fixed: every answer reports [`INPUT_TOKENS`] in and [`OUTPUT_TOKENS`] out.
//! Ids are deterministic: request number `n` (1-based, counting every recorded request) answers
//! with `chatcmpl-mock{n}` / `msg_mock{n}` / `resp_mock{n}` / `responseId` `gemini_mock{n}`, and
//! its `i`-th tool call (0-based) is `call_mock{n}_{i}` (OpenAI) or `toolu_mock{n}_{i}`
//! (Anthropic); Gemini's `functionCall`s carry no id, as with the real Gemini API.
//!
//! Streams split each text and each tool call's JSON arguments into two deltas (where there are
//! at least two characters), so clients must accumulate them as they do with a real provider.
//! Gemini streams split texts alike but send each `functionCall` whole (as Gemini does), all in the
//! last chunk, the only one with a `finishReason`; every Gemini chunk carries the full
//! `usageMetadata`, `modelVersion` and `responseId`, and ends with `\r\n\r\n` as Google's do.
//! Real clients retry 429 and 5xx answers (the Anthropic SDK, Claude Code and Codex all do), and
//! every retry takes another script entry.

#![allow(dead_code)] // each test uses only part of this

pub mod convo;

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Input tokens every answer reports (`prompt_tokens` / `input_tokens` / `promptTokenCount`).
pub const INPUT_TOKENS: u64 = 10;
/// Output tokens every answer reports (`completion_tokens` / `output_tokens` /
/// `candidatesTokenCount`).
pub const OUTPUT_TOKENS: u64 = 5;
/// `INPUT_TOKENS + OUTPUT_TOKENS`, reported as `total_tokens` by the OpenAI formats and as
/// `totalTokenCount` by Gemini.
pub const TOTAL_TOKENS: u64 = INPUT_TOKENS + OUTPUT_TOKENS;
/// What `POST /v1/messages/count_tokens` answers as `input_tokens`, and Gemini's `countTokens` as
/// `totalTokens`.
pub const COUNT_TOKENS: u64 = INPUT_TOKENS;
/// The Unix time every answer gives as `created` / `created_at`.
pub const CREATED: u64 = 1_700_000_000;
/// The text answered once the script is used up.
pub const EXHAUSTED_TEXT: &str = "done";
/// The model named in answers to requests that name none.
pub const DEFAULT_MODEL: &str = "mock-model";

/// One scripted model answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The model answers with this text and ends its turn.
    Text(String),
    /// The model calls one tool with these arguments (a JSON object).
    ToolCall { name: String, arguments: Value },
    /// The model calls several tools in one response (an empty list answers an empty text).
    ToolCalls(Vec<(String, Value)>),
    /// An HTTP error with this status and body (sent as `application/json` when the body is JSON,
    /// else `text/plain`).
    Status(u16, String),
}

impl Reply {
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    pub fn tool(name: impl Into<String>, arguments: Value) -> Reply {
        Reply::ToolCall {
            name: name.into(),
            arguments,
        }
    }
}

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    pub query: Option<String>,
    /// Header names lowercased; repeated headers joined with `", "`.
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON, or `Null` when it is empty or not JSON.
    pub body: Value,
    /// The body as text (lossy UTF-8), for bodies that are not JSON.
    pub body_text: String,
    /// The script entry this request was answered with (the `EXHAUSTED_TEXT` reply once the script
    /// is used up); `None` for requests that take no entry (token counts, 404s).
    pub reply: Option<Reply>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// One line: method, path, the reply it got and the start of its body (real clients send
    /// bodies of tens of kilobytes).
    pub fn summary(&self) -> String {
        const LIMIT: usize = 300;
        let body = match self.body_text.char_indices().nth(LIMIT) {
            Some((end, _)) => format!("{}…", &self.body_text[..end]),
            None => self.body_text.clone(),
        };
        let reply = match &self.reply {
            Some(reply) => format!("{reply:?}"),
            None => "no script entry".to_owned(),
        };
        format!("{} {} -> {reply}; body: {body}", self.method, self.path)
    }
}

/// The mock server; stops when dropped.
pub struct MockLlm {
    port: u16,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    recorded: Mutex<Vec<Recorded>>,
    seen: Condvar,
    /// With the script empty, model requests wait for a `push` (up to `HOLD_LIMIT`).
    hold: std::sync::atomic::AtomicBool,
    pushed: tokio::sync::Notify,
    /// Model requests that offer no tools (a CLI's side calls: session titles, summaries) get
    /// `SIDE_TEXT` and take no script entry.
    skip_toolless: std::sync::atomic::AtomicBool,
    /// Decides each answer from the request itself instead of a script (`think`).
    brain: Mutex<Option<Brain>>,
}

/// A model that answers from what a request offers and says (`convo::Convo`).
pub type Brain = Arc<dyn Fn(&convo::Convo) -> Reply + Send + Sync>;

/// What a skipped side call is answered.
pub const SIDE_TEXT: &str = "Side answer";

/// How long a held request waits for a `push` before it gets `EXHAUSTED_TEXT`.
const HOLD_LIMIT: Duration = Duration::from_secs(90);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MockLlm {
    /// Binds `127.0.0.1:0` and serves `script` until dropped. The socket listens before this
    /// returns, so clients may connect at once.
    pub fn start(script: Vec<Reply>) -> MockLlm {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            recorded: Mutex::new(Vec::new()),
            seen: Condvar::new(),
            hold: std::sync::atomic::AtomicBool::new(false),
            pushed: tokio::sync::Notify::new(),
            skip_toolless: std::sync::atomic::AtomicBool::new(false),
            brain: Mutex::new(None),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let server_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("mock-llm-{port}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(serve(listener, server_shared, stop_rx));
                // Dropping the runtime drops every connection task, closing its socket.
            })
            .unwrap();
        MockLlm {
            port,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash or `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every request so far, in the order they were received.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.recorded).clone()
    }

    /// Waits until at least `n` requests were received and returns all of them; panics, listing
    /// what it saw, if that takes longer than `timeout`.
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        let mut recorded = lock(&self.shared.recorded);
        while recorded.len() < n {
            let now = Instant::now();
            if now >= deadline {
                let seen: Vec<String> = recorded.iter().map(Recorded::summary).collect();
                drop(recorded);
                panic!(
                    "mock LLM: waited {timeout:?} for {n} requests but saw {}:\n{}",
                    seen.len(),
                    seen.join("\n")
                );
            }
            recorded = self
                .shared
                .seen
                .wait_timeout(recorded, deadline - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        recorded.clone()
    }

    /// Appends a reply to the script.
    pub fn push(&self, reply: Reply) {
        lock(&self.shared.script).push_back(reply);
        self.shared.pushed.notify_waiters();
    }

    /// From now on model requests that offer no tools (an agent CLI's side calls, such as
    /// session titles) are answered `SIDE_TEXT` without taking a script entry.
    pub fn skip_side_calls(&self) {
        self.shared
            .skip_toolless
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// From now on a model request finding the script empty waits for the next `push` (for
    /// answers that depend on what the test learns later, e.g. a worktree's path).
    pub fn hold_when_empty(&self) {
        self.shared
            .hold
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// From now on every model request that offers tools is answered by `brain` from the
    /// request alone (tool-less side calls get `SIDE_TEXT`); the script is not used.
    pub fn think(&self, brain: Brain) {
        *lock(&self.shared.brain) = Some(brain);
        self.skip_side_calls();
    }

    /// How many script entries are left.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.script).len()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let shared = Arc::clone(&shared);
                        async move { Ok::<_, Infallible>(handle(&shared, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Endpoint {
    ChatCompletions,
    Messages,
    CountTokens,
    Responses,
    GenerateContent,
    StreamGenerateContent,
    GeminiCountTokens,
}

fn route(method: &Method, path: &str) -> Option<Endpoint> {
    if method != Method::POST {
        return None;
    }
    if let Some((_, action)) = gemini_path(path) {
        return match action {
            "generateContent" => Some(Endpoint::GenerateContent),
            "streamGenerateContent" => Some(Endpoint::StreamGenerateContent),
            "countTokens" => Some(Endpoint::GeminiCountTokens),
            _ => None,
        };
    }
    match path.strip_prefix("/v1").unwrap_or(path) {
        "/chat/completions" => Some(Endpoint::ChatCompletions),
        "/messages" => Some(Endpoint::Messages),
        "/messages/count_tokens" => Some(Endpoint::CountTokens),
        "/responses" => Some(Endpoint::Responses),
        _ => None,
    }
}

/// The model and the action of a Gemini path, `/v1beta/models/{model}:{action}` (or `/v1/…`).
fn gemini_path(path: &str) -> Option<(&str, &str)> {
    let rest = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))?;
    rest.rsplit_once(':')
        .filter(|(model, _)| !model.is_empty() && !model.contains('/'))
}

async fn read_body(body: Incoming) -> Vec<u8> {
    let mut body = std::pin::pin!(body);
    let mut bytes = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    bytes.extend_from_slice(&data);
                }
            }
            Err(_) => break,
        }
    }
    bytes
}

/// Whether a model request offers tools (OpenAI and Anthropic `tools`, Gemini `tools`).
fn offers_tools(body: &Value) -> bool {
    body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

/// The next script entry; with the script empty, `EXHAUSTED_TEXT`, or in hold mode the next
/// pushed entry.
async fn next_reply(shared: &Shared) -> Reply {
    let deadline = tokio::time::Instant::now() + HOLD_LIMIT;
    loop {
        let pushed = shared.pushed.notified();
        let mut pushed = std::pin::pin!(pushed);
        pushed.as_mut().enable();
        if let Some(reply) = lock(&shared.script).pop_front() {
            return reply;
        }
        if !shared.hold.load(std::sync::atomic::Ordering::SeqCst)
            || tokio::time::timeout_at(deadline, pushed).await.is_err()
        {
            return Reply::text(EXHAUSTED_TEXT);
        }
    }
}

async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<MockBody> {
    let (parts, body) = request.into_parts();
    let raw = read_body(body).await;
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let path = parts.uri.path().to_owned();
    let endpoint = route(&parts.method, &path);
    let reply = match endpoint {
        Some(
            Endpoint::ChatCompletions
            | Endpoint::Messages
            | Endpoint::Responses
            | Endpoint::GenerateContent
            | Endpoint::StreamGenerateContent,
        ) => Some(
            if shared
                .skip_toolless
                .load(std::sync::atomic::Ordering::SeqCst)
                && !offers_tools(&body)
            {
                Reply::text(SIDE_TEXT)
            } else if let Some(brain) = lock(&shared.brain).clone() {
                brain(&convo::Convo::of(&body))
            } else {
                next_reply(shared).await
            },
        ),
        Some(Endpoint::CountTokens | Endpoint::GeminiCountTokens) | None => None,
    };
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let n = {
        let mut recorded = lock(&shared.recorded);
        recorded.push(Recorded {
            method: parts.method.to_string(),
            path: path.clone(),
            query: parts.uri.query().map(str::to_owned),
            headers,
            body: body.clone(),
            body_text: String::from_utf8_lossy(&raw).into_owned(),
            reply: reply.clone(),
        });
        recorded.len()
    };
    shared.seen.notify_all();

    let Some(endpoint) = endpoint else {
        let error = json!({
            "type": "error",
            "error": {
                "type": "not_found_error",
                "message": format!("mock LLM: no endpoint for {} {path}", parts.method),
                "path": path,
            },
        });
        return json_response(StatusCode::NOT_FOUND, n, &error);
    };
    if endpoint == Endpoint::CountTokens {
        return json_response(StatusCode::OK, n, &json!({ "input_tokens": COUNT_TOKENS }));
    }
    if endpoint == Endpoint::GeminiCountTokens {
        let count = json!({
            "totalTokens": COUNT_TOKENS,
            "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": COUNT_TOKENS }],
        });
        return json_response(StatusCode::OK, n, &count);
    }
    let turn = match reply.unwrap_or_else(|| Reply::text(EXHAUSTED_TEXT)) {
        Reply::Status(status, text) => return status_response(status, n, text),
        Reply::Text(text) => Turn::Text(text),
        Reply::ToolCall { name, arguments } => Turn::Calls(vec![(name, arguments)]),
        Reply::ToolCalls(calls) if calls.is_empty() => Turn::Text(String::new()),
        Reply::ToolCalls(calls) => Turn::Calls(calls),
    };
    let model = gemini_path(&path)
        .map(|(model, _)| model)
        .or_else(|| body.get("model").and_then(Value::as_str))
        .unwrap_or(DEFAULT_MODEL)
        .to_owned();
    let stream = match endpoint {
        Endpoint::GenerateContent => false,
        Endpoint::StreamGenerateContent => true,
        _ => body.get("stream").and_then(Value::as_bool) == Some(true),
    };
    match (endpoint, stream) {
        (Endpoint::ChatCompletions, false) => {
            json_response(StatusCode::OK, n, &chat_completion(n, &model, &turn))
        }
        (Endpoint::ChatCompletions, true) => {
            let include_usage = body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true);
            sse_response(n, chat_completion_chunks(n, &model, &turn, include_usage))
        }
        (Endpoint::Messages, false) => json_response(StatusCode::OK, n, &message(n, &model, &turn)),
        (Endpoint::Messages, true) => sse_response(n, message_events(n, &model, &turn)),
        (Endpoint::Responses, false) => json_response(
            StatusCode::OK,
            n,
            &response_object(n, &model, "completed", response_output(n, &turn), true),
        ),
        (Endpoint::Responses, true) => sse_response(n, response_events(n, &model, &turn)),
        (Endpoint::GenerateContent, _) => {
            let answer = gemini_response(n, &model, gemini_parts(&turn), true);
            json_response(StatusCode::OK, n, &answer)
        }
        (Endpoint::StreamGenerateContent, _) => {
            let chunks = gemini_chunks(n, &model, &turn);
            let sse = parts
                .uri
                .query()
                .is_some_and(|query| query.split('&').any(|pair| pair == "alt=sse"));
            if sse {
                sse_response(n, chunks.iter().map(gemini_sse_data).collect())
            } else {
                json_response(StatusCode::OK, n, &Value::Array(chunks))
            }
        }
        (Endpoint::CountTokens | Endpoint::GeminiCountTokens, _) => {
            unreachable!("answered above")
        }
    }
}

/// A scripted answer reduced to what every format needs.
enum Turn {
    Text(String),
    Calls(Vec<(String, Value)>),
}

/// Splits a text into the pieces streamed as deltas: two halves (at a char boundary) when it has
/// at least two characters, else the text itself, and nothing for an empty text.
fn pieces(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let chars = text.chars().count();
    if chars < 2 {
        return vec![text];
    }
    let mid = text
        .char_indices()
        .nth(chars / 2)
        .map_or(text.len(), |(i, _)| i);
    vec![&text[..mid], &text[mid..]]
}

fn arguments_string(arguments: &Value) -> String {
    serde_json::to_string(arguments).unwrap()
}

// ---- OpenAI Chat Completions -------------------------------------------------------------------

fn chat_usage() -> Value {
    json!({
        "prompt_tokens": INPUT_TOKENS,
        "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": TOTAL_TOKENS,
    })
}

fn chat_completion(n: usize, model: &str, turn: &Turn) -> Value {
    let (message, finish_reason) = match turn {
        Turn::Text(text) => (
            json!({ "role": "assistant", "content": text, "refusal": null }),
            "stop",
        ),
        Turn::Calls(calls) => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    json!({
                        "id": format!("call_mock{n}_{i}"),
                        "type": "function",
                        "function": { "name": name, "arguments": arguments_string(arguments) },
                    })
                })
                .collect();
            (
                json!({
                    "role": "assistant",
                    "content": null,
                    "refusal": null,
                    "tool_calls": tool_calls,
                }),
                "tool_calls",
            )
        }
    };
    json!({
        "id": format!("chatcmpl-mock{n}"),
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
        "usage": chat_usage(),
    })
}

fn chat_completion_chunks(n: usize, model: &str, turn: &Turn, include_usage: bool) -> Vec<Bytes> {
    let chunk = |delta: Value, finish_reason: Value| {
        let mut chunk = json!({
            "id": format!("chatcmpl-mock{n}"),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        });
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        sse_data(&chunk)
    };
    let mut out = Vec::new();
    let finish_reason = match turn {
        Turn::Text(text) => {
            out.push(chunk(
                json!({ "role": "assistant", "content": "", "refusal": null }),
                Value::Null,
            ));
            for piece in pieces(text) {
                out.push(chunk(json!({ "content": piece }), Value::Null));
            }
            "stop"
        }
        Turn::Calls(calls) => {
            for (i, (name, arguments)) in calls.iter().enumerate() {
                let start = json!({
                    "index": i,
                    "id": format!("call_mock{n}_{i}"),
                    "type": "function",
                    "function": { "name": name, "arguments": "" },
                });
                let delta = if i == 0 {
                    json!({ "role": "assistant", "content": null, "tool_calls": [start] })
                } else {
                    json!({ "tool_calls": [start] })
                };
                out.push(chunk(delta, Value::Null));
                for piece in pieces(&arguments_string(arguments)) {
                    out.push(chunk(
                        json!({ "tool_calls": [{ "index": i, "function": { "arguments": piece } }] }),
                        Value::Null,
                    ));
                }
            }
            "tool_calls"
        }
    };
    out.push(chunk(json!({}), json!(finish_reason)));
    if include_usage {
        out.push(sse_data(&json!({
            "id": format!("chatcmpl-mock{n}"),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [],
            "usage": chat_usage(),
        })));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

// ---- Anthropic Messages ------------------------------------------------------------------------

fn anthropic_usage(output_tokens: u64) -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    })
}

fn anthropic_content(n: usize, turn: &Turn) -> (Vec<Value>, &'static str) {
    match turn {
        Turn::Text(text) => (vec![json!({ "type": "text", "text": text })], "end_turn"),
        Turn::Calls(calls) => (
            calls
                .iter()
                .enumerate()
                .map(|(i, (name, input))| {
                    json!({
                        "type": "tool_use",
                        "id": format!("toolu_mock{n}_{i}"),
                        "name": name,
                        "input": input,
                    })
                })
                .collect(),
            "tool_use",
        ),
    }
}

fn message(n: usize, model: &str, turn: &Turn) -> Value {
    let (content, stop_reason) = anthropic_content(n, turn);
    json!({
        "id": format!("msg_mock{n}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": anthropic_usage(OUTPUT_TOKENS),
    })
}

fn message_events(n: usize, model: &str, turn: &Turn) -> Vec<Bytes> {
    let (content, stop_reason) = anthropic_content(n, turn);
    let mut out = vec![
        sse_event(
            "message_start",
            &json!({
                "type": "message_start",
                "message": {
                    "id": format!("msg_mock{n}"),
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": anthropic_usage(1),
                },
            }),
        ),
        sse_event("ping", &json!({ "type": "ping" })),
    ];
    for (index, block) in content.iter().enumerate() {
        let (start, deltas) = if block["type"] == "text" {
            let text = block["text"].as_str().unwrap_or_default();
            let deltas: Vec<Value> = pieces(text)
                .into_iter()
                .map(|piece| json!({ "type": "text_delta", "text": piece }))
                .collect();
            (json!({ "type": "text", "text": "" }), deltas)
        } else {
            let input = arguments_string(&block["input"]);
            let deltas: Vec<Value> = pieces(&input)
                .into_iter()
                .map(|piece| json!({ "type": "input_json_delta", "partial_json": piece }))
                .collect();
            let start = json!({
                "type": "tool_use",
                "id": block["id"],
                "name": block["name"],
                "input": {},
            });
            (start, deltas)
        };
        out.push(sse_event(
            "content_block_start",
            &json!({ "type": "content_block_start", "index": index, "content_block": start }),
        ));
        for delta in deltas {
            out.push(sse_event(
                "content_block_delta",
                &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
            ));
        }
        out.push(sse_event(
            "content_block_stop",
            &json!({ "type": "content_block_stop", "index": index }),
        ));
    }
    out.push(sse_event(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason, "stop_sequence": null },
            "usage": { "output_tokens": OUTPUT_TOKENS },
        }),
    ));
    out.push(sse_event(
        "message_stop",
        &json!({ "type": "message_stop" }),
    ));
    out
}

// ---- OpenAI Responses --------------------------------------------------------------------------

fn responses_usage() -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens": OUTPUT_TOKENS,
        "output_tokens_details": { "reasoning_tokens": 0 },
        "total_tokens": TOTAL_TOKENS,
    })
}

fn response_object(n: usize, model: &str, status: &str, output: Vec<Value>, done: bool) -> Value {
    json!({
        "id": format!("resp_mock{n}"),
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "usage": if done { responses_usage() } else { Value::Null },
    })
}

fn output_text(text: &str) -> Value {
    json!({ "type": "output_text", "text": text, "annotations": [] })
}

/// The finished output items of a turn.
fn response_output(n: usize, turn: &Turn) -> Vec<Value> {
    match turn {
        Turn::Text(text) => vec![json!({
            "id": format!("msg_mock{n}"),
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [output_text(text)],
        })],
        Turn::Calls(calls) => calls
            .iter()
            .enumerate()
            .map(|(i, (name, arguments))| {
                let mut item = json!({
                    "id": format!("fc_mock{n}_{i}"),
                    "type": "function_call",
                    "status": "completed",
                    "call_id": format!("call_mock{n}_{i}"),
                    "name": name,
                    "arguments": arguments_string(arguments),
                });
                // A tool of a namespace (`{"type": "namespace"}`, as Codex offers MCP
                // servers' tools), named `namespace::tool` in a reply.
                if let Some((namespace, tool)) = name.split_once("::") {
                    item["namespace"] = json!(namespace);
                    item["name"] = json!(tool);
                }
                item
            })
            .collect(),
    }
}

fn response_events(n: usize, model: &str, turn: &Turn) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut sequence = 0u64;
    let mut emit = |kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(sequence);
        sequence += 1;
        out.push(sse_event(kind, &data));
    };
    let in_progress = response_object(n, model, "in_progress", Vec::new(), false);
    emit("response.created", json!({ "response": in_progress }));
    emit("response.in_progress", json!({ "response": in_progress }));
    let output = response_output(n, turn);
    for (output_index, item) in output.iter().enumerate() {
        let item_id = item["id"].clone();
        if item["type"] == "message" {
            let text = item["content"][0]["text"].as_str().unwrap_or_default();
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["content"] = json!([]);
            emit(
                "response.output_item.added",
                json!({ "output_index": output_index, "item": added }),
            );
            emit(
                "response.content_part.added",
                json!({
                    "item_id": item_id,
                    "output_index": output_index,
                    "content_index": 0,
                    "part": output_text(""),
                }),
            );
            for piece in pieces(text) {
                emit(
                    "response.output_text.delta",
                    json!({
                        "item_id": item_id,
                        "output_index": output_index,
                        "content_index": 0,
                        "delta": piece,
                        "logprobs": [],
                    }),
                );
            }
            emit(
                "response.output_text.done",
                json!({
                    "item_id": item_id,
                    "output_index": output_index,
                    "content_index": 0,
                    "text": text,
                    "logprobs": [],
                }),
            );
            emit(
                "response.content_part.done",
                json!({
                    "item_id": item_id,
                    "output_index": output_index,
                    "content_index": 0,
                    "part": output_text(text),
                }),
            );
        } else {
            let arguments = item["arguments"].as_str().unwrap_or_default();
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["arguments"] = json!("");
            emit(
                "response.output_item.added",
                json!({ "output_index": output_index, "item": added }),
            );
            for piece in pieces(arguments) {
                emit(
                    "response.function_call_arguments.delta",
                    json!({ "item_id": item_id, "output_index": output_index, "delta": piece }),
                );
            }
            emit(
                "response.function_call_arguments.done",
                json!({
                    "item_id": item_id,
                    "output_index": output_index,
                    "name": item["name"],
                    "arguments": arguments,
                }),
            );
        }
        emit(
            "response.output_item.done",
            json!({ "output_index": output_index, "item": item }),
        );
    }
    emit(
        "response.completed",
        json!({ "response": response_object(n, model, "completed", output, true) }),
    );
    out
}

// ---- Google Gemini generateContent -------------------------------------------------------------

fn gemini_usage() -> Value {
    json!({
        "promptTokenCount": INPUT_TOKENS,
        "candidatesTokenCount": OUTPUT_TOKENS,
        "totalTokenCount": TOTAL_TOKENS,
        "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": INPUT_TOKENS }],
    })
}

/// The `parts` of a whole turn: one text, or one `functionCall` per call.
fn gemini_parts(turn: &Turn) -> Vec<Value> {
    match turn {
        Turn::Text(text) => vec![json!({ "text": text })],
        Turn::Calls(calls) => calls
            .iter()
            .map(|(name, args)| json!({ "functionCall": { "name": name, "args": args } }))
            .collect(),
    }
}

/// A `GenerateContentResponse` (a whole answer, or one chunk of a stream) with these parts; only
/// the last one has a `finishReason`.
fn gemini_response(n: usize, model: &str, parts: Vec<Value>, last: bool) -> Value {
    let mut candidate = json!({
        "content": { "parts": parts, "role": "model" },
        "index": 0,
    });
    if last {
        candidate["finishReason"] = json!("STOP");
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": gemini_usage(),
        "modelVersion": model,
        "responseId": format!("gemini_mock{n}"),
    })
}

/// The chunks of a `streamGenerateContent` answer: a text in two pieces, or every function call
/// in one chunk.
fn gemini_chunks(n: usize, model: &str, turn: &Turn) -> Vec<Value> {
    let Turn::Text(text) = turn else {
        return vec![gemini_response(n, model, gemini_parts(turn), true)];
    };
    let pieces = pieces(text);
    if pieces.is_empty() {
        return vec![gemini_response(n, model, vec![json!({ "text": "" })], true)];
    }
    let last = pieces.len() - 1;
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, piece)| gemini_response(n, model, vec![json!({ "text": piece })], i == last))
        .collect()
}

// ---- HTTP plumbing -----------------------------------------------------------------------------

fn sse_event(kind: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

fn sse_data(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// Google ends its SSE events with CRLFs.
fn gemini_sse_data(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\r\n\r\n"))
}

fn with_request_id(mut response: Response<MockBody>, n: usize) -> Response<MockBody> {
    let id = HeaderValue::from_str(&format!("req_mock{n}")).unwrap();
    response.headers_mut().insert("x-request-id", id.clone());
    response.headers_mut().insert("request-id", id);
    response
}

fn json_response(status: StatusCode, n: usize, body: &Value) -> Response<MockBody> {
    let mut response = Response::new(MockBody::Full(Some(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    with_request_id(response, n)
}

fn status_response(status: u16, n: usize, body: String) -> Response<MockBody> {
    let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = Response::new(MockBody::Full(Some(Bytes::from(body))));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    with_request_id(response, n)
}

/// A `text/event-stream` answer sent with chunked transfer encoding, one chunk per event.
fn sse_response(n: usize, events: Vec<Bytes>) -> Response<MockBody> {
    let mut response = Response::new(MockBody::Chunks(events.into()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_request_id(response, n)
}

/// A response body: one buffer with a known length (sent with `Content-Length`), or a sequence
/// of chunks of unknown total length (sent chunked).
enum MockBody {
    Full(Option<Bytes>),
    Chunks(VecDeque<Bytes>),
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = match self.get_mut() {
            MockBody::Full(bytes) => bytes.take(),
            MockBody::Chunks(chunks) => chunks.pop_front(),
        };
        Poll::Ready(next.map(|bytes| Ok(Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(bytes) => bytes.is_none(),
            MockBody::Chunks(chunks) => chunks.is_empty(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            MockBody::Chunks(_) => SizeHint::default(),
        }
    }
}

// ---- Checks of the mock itself -----------------------------------------------------------------

/// Posts `body` to the mock over a plain TCP connection (HTTP/1.1, `Connection: close`) and
/// returns the status, the lowercased headers and the body (de-chunked).
fn post(
    mock: &MockLlm,
    path_and_query: &str,
    body: &Value,
) -> (u16, BTreeMap<String, String>, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", mock.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = body.to_string();
    write!(
        stream,
        "POST {path_and_query} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         x-goog-api-key: dummy\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: BTreeMap<String, String> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.trim().to_ascii_lowercase(), value.trim().to_owned())
        })
        .collect();
    let body = if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        let mut body = String::new();
        let mut rest = rest;
        loop {
            let (size, after) = rest.split_once("\r\n").unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            body.push_str(&after[..size]);
            rest = after[size..].strip_prefix("\r\n").unwrap();
        }
        body
    } else {
        rest.to_owned()
    };
    (status, headers, body)
}

/// The `data:` payloads of a Gemini SSE body, each event ended by `\r\n\r\n`.
fn gemini_events(body: &str) -> Vec<Value> {
    let events = body.strip_suffix("\r\n\r\n").unwrap().split("\r\n\r\n");
    events
        .map(|event| serde_json::from_str(event.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

fn assert_gemini_chunk(chunk: &Value, n: usize, model: &str) {
    assert_eq!(chunk["candidates"].as_array().unwrap().len(), 1, "{chunk}");
    assert_eq!(
        chunk["candidates"][0]["content"]["role"], "model",
        "{chunk}"
    );
    assert_eq!(chunk["candidates"][0]["index"], 0, "{chunk}");
    let usage = &chunk["usageMetadata"];
    assert_eq!(usage["promptTokenCount"], INPUT_TOKENS, "{chunk}");
    assert_eq!(usage["candidatesTokenCount"], OUTPUT_TOKENS, "{chunk}");
    assert_eq!(usage["totalTokenCount"], TOTAL_TOKENS, "{chunk}");
    assert_eq!(chunk["modelVersion"], model, "{chunk}");
    assert_eq!(chunk["responseId"], format!("gemini_mock{n}"), "{chunk}");
}

#[test]
fn mock_llm_speaks_gemini_generate_content_plain_and_streamed() {
    let model = "gemini-2.5-flash";
    let generate = format!("/v1beta/models/{model}:generateContent");
    let stream = format!("/v1beta/models/{model}:streamGenerateContent");
    let request = json!({
        "contents": [{ "role": "user", "parts": [{ "text": "hello" }] }],
        "tools": [{ "functionDeclarations": [{ "name": "read_file" }] }],
    });
    let mock = MockLlm::start(vec![
        Reply::text("Hello, Gemini"),
        Reply::tool("read_file", json!({ "path": "a.txt" })),
        Reply::text("Streamed text"),
        Reply::ToolCalls(vec![
            ("read_file".to_owned(), json!({ "path": "a.txt" })),
            ("list_dir".to_owned(), json!({})),
        ]),
        Reply::text("as an array"),
        Reply::Status(
            429,
            r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED"}}"#.to_owned(),
        ),
    ]);

    // 1: a whole text answer.
    let (status, headers, body) = post(&mock, &generate, &request);
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_gemini_chunk(&answer, 1, model);
    let candidate = &answer["candidates"][0];
    assert_eq!(
        candidate["content"]["parts"],
        json!([{ "text": "Hello, Gemini" }])
    );
    assert_eq!(candidate["finishReason"], "STOP");

    // 2: a whole function call (no id, like the real API).
    let (status, _, body) = post(&mock, &generate, &request);
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_gemini_chunk(&answer, 2, model);
    assert_eq!(
        answer["candidates"][0]["content"]["parts"],
        json!([{ "functionCall": { "name": "read_file", "args": { "path": "a.txt" } } }])
    );
    assert_eq!(answer["candidates"][0]["finishReason"], "STOP");

    // 3: a streamed text, in two chunks; only the last one finishes.
    let (status, headers, body) = post(&mock, &format!("{stream}?alt=sse"), &request);
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let chunks = gemini_events(&body);
    assert_eq!(chunks.len(), 2, "{body}");
    let mut text = String::new();
    for (i, chunk) in chunks.iter().enumerate() {
        assert_gemini_chunk(chunk, 3, model);
        let parts = chunk["candidates"][0]["content"]["parts"]
            .as_array()
            .unwrap();
        assert_eq!(parts.len(), 1, "{chunk}");
        let piece = parts[0]["text"].as_str().unwrap();
        assert!(!piece.is_empty(), "{chunk}");
        text.push_str(piece);
        let finish = &chunk["candidates"][0]["finishReason"];
        if i + 1 == chunks.len() {
            assert_eq!(finish, "STOP");
        } else {
            assert!(finish.is_null(), "{chunk}");
        }
    }
    assert_eq!(text, "Streamed text");

    // 4: streamed function calls come whole, in one finishing chunk.
    let (status, _, body) = post(&mock, &format!("{stream}?alt=sse"), &request);
    assert_eq!(status, 200);
    let chunks = gemini_events(&body);
    assert_eq!(chunks.len(), 1, "{body}");
    assert_gemini_chunk(&chunks[0], 4, model);
    assert_eq!(
        chunks[0]["candidates"][0]["content"]["parts"],
        json!([
            { "functionCall": { "name": "read_file", "args": { "path": "a.txt" } } },
            { "functionCall": { "name": "list_dir", "args": {} } },
        ])
    );
    assert_eq!(chunks[0]["candidates"][0]["finishReason"], "STOP");

    // 5: without alt=sse the stream is a JSON array of the same chunks.
    let (status, headers, body) = post(&mock, &stream, &request);
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    let chunks: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(chunks.len(), 2, "{body}");
    assert_gemini_chunk(&chunks[1], 5, model);
    assert_eq!(chunks[1]["candidates"][0]["finishReason"], "STOP");

    // countTokens takes no script entry; the next call gets the scripted 429.
    let (status, _, body) = post(
        &mock,
        &format!("/v1beta/models/{model}:countTokens"),
        &request,
    );
    assert_eq!(status, 200);
    let count: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(count["totalTokens"], COUNT_TOKENS);
    let (status, _, body) = post(&mock, &generate, &request);
    assert_eq!(status, 429);
    assert!(body.contains("RESOURCE_EXHAUSTED"), "{body}");
    // Vertex AI's `/v1/` path and the used-up script.
    let (status, _, body) = post(&mock, "/v1/models/gemini-pro:generateContent", &request);
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_gemini_chunk(&answer, 8, "gemini-pro");
    assert_eq!(
        answer["candidates"][0]["content"]["parts"][0]["text"],
        EXHAUSTED_TEXT
    );
    // An unknown Gemini action is a 404.
    let (status, _, _) = post(
        &mock,
        &format!("/v1beta/models/{model}:embedContent"),
        &request,
    );
    assert_eq!(status, 404);

    let requests = mock.requests();
    assert_eq!(requests.len(), 9);
    assert_eq!(requests[2].path, stream);
    assert_eq!(requests[2].query.as_deref(), Some("alt=sse"));
    assert_eq!(requests[2].header("x-goog-api-key"), Some("dummy"));
    assert_eq!(requests[2].body, request);
    assert_eq!(requests[2].reply, Some(Reply::text("Streamed text")));
    assert_eq!(requests[5].reply, None, "countTokens takes no script entry");
    assert_eq!(requests[7].reply, Some(Reply::text(EXHAUSTED_TEXT)));
    assert_eq!(requests[8].reply, None);
    assert_eq!(mock.remaining(), 0);
}
