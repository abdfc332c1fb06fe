//! The agentic loop both executors run: ask the provider, report usage, call the tools the
//! model asked for, and stop on a successful `complete`, a plain answer, the turn limit, the
//! deadline or an error. Providers differ only in how they spell requests and replies.

use serde_json::{Value, json};

use crate::config::ExecutorConfig;
use crate::http::{now_ms, post_json};

/// The name of the tool whose successful call ends a run.
pub const COMPLETE_TOOL: &str = "complete";
/// A router's step has this one tool and ends with it (seed 002: single-turn routing).
pub const ROUTE_TOOL: &str = "route_to";

/// How loud a log line is (the host's `level`, without depending on one crate's bindings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
}

/// What the loop needs from the host. Each executor implements the last three with its
/// bindings; the first two default to the real wall clock and `wasi:http`.
pub trait Env {
    /// Unix time in milliseconds.
    fn now_ms(&self) -> u64 {
        now_ms()
    }

    /// POSTs JSON and returns the JSON response (errors for non-2xx and non-JSON bodies).
    fn post(
        &mut self,
        url: &str,
        headers: &[(&str, &str)],
        body: &Value,
        deadline_ms: u64,
    ) -> Result<Value, String> {
        post_json(url, headers, body, deadline_ms)
    }

    /// `tools::call-tool`.
    fn call_tool(&mut self, name: &str, arguments: &str) -> Result<String, String>;

    /// `tools::report-usage`.
    fn report_usage(&mut self, input_tokens: u64, output_tokens: u64, cost_usd: f64);

    /// `host::log`.
    fn log(&mut self, level: LogLevel, message: &str);
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments.
    pub schema: Value,
}

/// Parses the task's tools (`(name, description, parameters as a JSON string)`) and adds the
/// `complete` tool when the task does not list it, so the model always knows how to finish
/// (a router's step, offered `route_to`, finishes with that instead).
pub fn tool_specs<'a>(
    tools: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
) -> Result<Vec<ToolSpec>, String> {
    let mut specs = Vec::new();
    for (name, description, parameters) in tools {
        let schema = if parameters.trim().is_empty() {
            json!({"type": "object", "properties": {}})
        } else {
            serde_json::from_str(parameters)
                .map_err(|e| format!("tool `{name}`: parameters are not a JSON Schema: {e}"))?
        };
        specs.push(ToolSpec {
            name: name.to_string(),
            description: description.to_string(),
            schema,
        });
    }
    if !specs
        .iter()
        .any(|t| t.name == COMPLETE_TOOL || t.name == ROUTE_TOOL)
    {
        specs.push(ToolSpec {
            name: COMPLETE_TOOL.to_string(),
            description: "Finish the task: give a short summary of what you did and the structured artifacts the workflow asks for.".to_string(),
            schema: json!({
                "type": "object",
                "properties": {
                    "summary": {"type": "string"},
                    "artifacts": {"type": "object"}
                },
                "required": ["summary"]
            }),
        });
    }
    Ok(specs)
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as a JSON string.
    pub arguments: String,
}

/// What one provider response says, in the loop's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The assistant's text (the final answer when there are no tool calls).
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// The assistant message to append to the conversation before the tool results.
    pub assistant: Value,
    /// Why the model stopped, as the provider says it (for the log).
    pub stop_reason: Option<String>,
}

/// One provider's wire format.
pub trait Provider {
    /// The URL every turn POSTs to.
    fn url(&self) -> String;
    /// Extra request headers (never the key: the host injects it).
    fn headers(&self) -> Vec<(&'static str, &'static str)>;
    /// The conversation before the first turn.
    fn initial_messages(&self) -> Vec<Value>;
    /// The request body for the conversation so far.
    fn body(&self, messages: &[Value]) -> Value;
    /// `(input tokens, output tokens)` of a response; zeros when it says nothing.
    fn usage(&self, response: &Value) -> (u64, u64);
    /// Reads a response; the error says what was missing or malformed.
    fn parse(&self, response: &Value) -> Result<Reply, String>;
    /// The messages that carry the results of the calls of one reply back to the model.
    fn tool_results(&self, results: &[(ToolCall, Result<String, String>)]) -> Vec<Value>;
}

/// The run's limits, from the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_turns: u32,
    /// Unix milliseconds.
    pub deadline_ms: u64,
}

/// How a run ended well.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub summary: String,
    /// A JSON object as a string.
    pub artifacts: String,
    pub turns: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// The text of a tool call's result as the model reads it.
pub fn tool_result_text(result: &Result<String, String>) -> String {
    match result {
        Ok(text) => text.clone(),
        Err(message) => format!("error: {message}"),
    }
}

/// The summary and artifacts (a JSON object as a string, `{}` when absent) of a successful
/// `complete` call's arguments.
pub fn complete_outcome(arguments: &str) -> (String, String) {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let summary = match args.get("summary") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let artifacts = match args.get("artifacts") {
        None | Some(Value::Null) => "{}".to_string(),
        // Some models send the object as a JSON string.
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v.to_string(),
            _ => Value::String(s.clone()).to_string(),
        },
        Some(other) => other.to_string(),
    };
    (summary, artifacts)
}

/// A non-negative integer field of a JSON object, 0 when absent.
pub fn u64_field(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn check_turns(turns: u32, max_turns: u32) -> Result<(), String> {
    if turns >= max_turns {
        Err(format!(
            "max turns exceeded: {turns} provider request(s) made (max-turns {max_turns}) and the model has not completed"
        ))
    } else {
        Ok(())
    }
}

fn check_deadline(now_ms: u64, deadline_ms: u64, turns: u32) -> Result<(), String> {
    if now_ms >= deadline_ms {
        Err(format!(
            "deadline passed after {turns} turn(s): deadline-ms {deadline_ms}, now {now_ms} (Unix ms)"
        ))
    } else {
        Ok(())
    }
}

/// Runs the loop until the model completes or something stops it. A turn is one provider
/// request.
pub fn run_loop(
    env: &mut impl Env,
    provider: &impl Provider,
    config: &ExecutorConfig,
    limits: Limits,
) -> Result<Finished, String> {
    let url = provider.url();
    let headers = provider.headers();
    let mut messages = provider.initial_messages();
    let mut finished = Finished {
        summary: String::new(),
        artifacts: "{}".to_string(),
        turns: 0,
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
    };
    loop {
        let turns = finished.turns;
        check_turns(turns, limits.max_turns)?;
        check_deadline(env.now_ms(), limits.deadline_ms, turns)?;
        finished.turns += 1;
        let turn = finished.turns;

        let response = env
            .post(
                &url,
                &headers,
                &provider.body(&messages),
                limits.deadline_ms,
            )
            .map_err(|e| format!("turn {turn}: {e}"))?;
        let (input_tokens, output_tokens) = provider.usage(&response);
        let cost_usd = config.cost_usd(input_tokens, output_tokens);
        env.report_usage(input_tokens, output_tokens, cost_usd);
        finished.input_tokens += input_tokens;
        finished.output_tokens += output_tokens;
        finished.cost_usd += cost_usd;

        let reply = provider
            .parse(&response)
            .map_err(|e| format!("turn {turn}: unparseable response from {url}: {e}"))?;
        let stop = reply.stop_reason.as_deref().unwrap_or("unknown");
        if reply.tool_calls.is_empty() {
            env.log(
                LogLevel::Info,
                &format!(
                    "turn {turn}: the model answered without tool calls (stop reason {stop}); done"
                ),
            );
            finished.summary = reply.text;
            return Ok(finished);
        }
        let names: Vec<&str> = reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
        env.log(
            LogLevel::Debug,
            &format!("turn {turn}: tool calls {}", names.join(", ")),
        );

        messages.push(reply.assistant);
        let mut results = Vec::with_capacity(reply.tool_calls.len());
        for call in reply.tool_calls {
            let result = env.call_tool(&call.name, &call.arguments);
            if call.name == ROUTE_TOOL && result.is_ok() {
                env.log(LogLevel::Info, &format!("turn {turn}: routed"));
                finished.summary = "routed".to_string();
                return Ok(finished);
            }
            if call.name == COMPLETE_TOOL {
                match &result {
                    Ok(_) => {
                        let (summary, artifacts) = complete_outcome(&call.arguments);
                        env.log(LogLevel::Info, &format!("turn {turn}: completed"));
                        finished.summary = summary;
                        finished.artifacts = artifacts;
                        return Ok(finished);
                    }
                    Err(e) => env.log(
                        LogLevel::Info,
                        &format!("turn {turn}: `complete` was refused: {e}"),
                    ),
                }
            }
            results.push((call, result));
        }
        messages.extend(provider.tool_results(&results));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A host that replays canned responses and records what the loop did.
    #[derive(Default)]
    struct FakeEnv {
        now: u64,
        responses: VecDeque<Result<Value, String>>,
        bodies: Vec<Value>,
        calls: Vec<(String, String)>,
        tool_answers: VecDeque<Result<String, String>>,
        usage: Vec<(u64, u64, f64)>,
    }

    impl Env for FakeEnv {
        fn now_ms(&self) -> u64 {
            self.now
        }
        fn post(
            &mut self,
            _url: &str,
            _headers: &[(&str, &str)],
            body: &Value,
            _deadline_ms: u64,
        ) -> Result<Value, String> {
            self.bodies.push(body.clone());
            self.now += 10;
            self.responses
                .pop_front()
                .unwrap_or_else(|| Err("no more responses".to_string()))
        }
        fn call_tool(&mut self, name: &str, arguments: &str) -> Result<String, String> {
            self.calls.push((name.to_string(), arguments.to_string()));
            self.tool_answers
                .pop_front()
                .unwrap_or_else(|| Ok("ok".to_string()))
        }
        fn report_usage(&mut self, input_tokens: u64, output_tokens: u64, cost_usd: f64) {
            self.usage.push((input_tokens, output_tokens, cost_usd));
        }
        fn log(&mut self, _level: LogLevel, _message: &str) {}
    }

    /// A provider whose wire format is the loop's own terms:
    /// `{"text", "calls": [[name, args]], "in", "out"}`.
    struct FakeProvider;

    impl Provider for FakeProvider {
        fn url(&self) -> String {
            "https://fake/v1".to_string()
        }
        fn headers(&self) -> Vec<(&'static str, &'static str)> {
            Vec::new()
        }
        fn initial_messages(&self) -> Vec<Value> {
            vec![json!("prompt")]
        }
        fn body(&self, messages: &[Value]) -> Value {
            json!({ "messages": messages })
        }
        fn usage(&self, response: &Value) -> (u64, u64) {
            (u64_field(response, "in"), u64_field(response, "out"))
        }
        fn parse(&self, response: &Value) -> Result<Reply, String> {
            let text = response
                .get("text")
                .and_then(Value::as_str)
                .ok_or("no text")?
                .to_string();
            let tool_calls = response
                .get("calls")
                .and_then(Value::as_array)
                .map(|calls| {
                    calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| ToolCall {
                            id: i.to_string(),
                            name: c[0].as_str().unwrap_or_default().to_string(),
                            arguments: c[1].as_str().unwrap_or_default().to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(Reply {
                text: text.clone(),
                tool_calls,
                assistant: json!({ "assistant": text }),
                stop_reason: None,
            })
        }
        fn tool_results(&self, results: &[(ToolCall, Result<String, String>)]) -> Vec<Value> {
            results
                .iter()
                .map(|(call, result)| json!({ call.id.clone(): tool_result_text(result) }))
                .collect()
        }
    }

    fn config() -> ExecutorConfig {
        ExecutorConfig::parse(
            r#"{"input_cost_per_mtok":1,"output_cost_per_mtok":2}"#,
            "https://x",
        )
        .expect("config")
    }

    const LIMITS: Limits = Limits {
        max_turns: 5,
        deadline_ms: 1000,
    };

    #[test]
    fn tools_then_complete() {
        let mut env = FakeEnv {
            responses: VecDeque::from([
                Ok(
                    json!({"text": "", "calls": [["read", "{\"p\":1}"], ["write", "{}"]], "in": 10, "out": 5}),
                ),
                Ok(
                    json!({"text": "", "calls": [["complete", "{\"summary\":\"x\"}"]], "in": 20, "out": 1}),
                ),
                Ok(
                    json!({"text": "", "calls": [["complete", "{\"summary\":\"done\",\"artifacts\":{\"n\":1}}"], ["never", "{}"]], "in": 30, "out": 2}),
                ),
            ]),
            tool_answers: VecDeque::from([
                Ok("file".to_string()),
                Err("denied".to_string()),
                Err("summary too short".to_string()),
                Ok("accepted".to_string()),
            ]),
            ..FakeEnv::default()
        };
        let done = run_loop(&mut env, &FakeProvider, &config(), LIMITS).expect("completes");
        assert_eq!(done.summary, "done");
        assert_eq!(done.artifacts, r#"{"n":1}"#);
        assert_eq!(done.turns, 3);
        assert_eq!((done.input_tokens, done.output_tokens), (60, 8));
        assert!((done.cost_usd - 76e-6).abs() < 1e-12);
        assert_eq!(env.usage.len(), 3);
        let names: Vec<&str> = env.calls.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["read", "write", "complete", "complete"]);
        // The second request carries the assistant message and both results, the refusal
        // as text the model can read.
        assert_eq!(
            env.bodies[1]["messages"],
            json!(["prompt", {"assistant": ""}, {"0": "file"}, {"1": "error: denied"}])
        );
        assert_eq!(env.bodies[2]["messages"][4], json!({"assistant": ""}));
        assert_eq!(
            env.bodies[2]["messages"][5],
            json!({"0": "error: summary too short"})
        );
    }

    #[test]
    fn a_plain_answer_ends_the_run() {
        let mut env = FakeEnv {
            responses: VecDeque::from([Ok(json!({"text": "42"}))]),
            ..FakeEnv::default()
        };
        let done = run_loop(&mut env, &FakeProvider, &config(), LIMITS).expect("answers");
        assert_eq!(
            (done.summary.as_str(), done.artifacts.as_str(), done.turns),
            ("42", "{}", 1)
        );
        assert_eq!(env.usage, [(0, 0, 0.0)]);
    }

    #[test]
    fn limits_and_errors_stop_the_run() {
        let busy = || Ok(json!({"text": "", "calls": [["read", "{}"]]}));
        let mut env = FakeEnv {
            responses: VecDeque::from([busy(), busy(), busy()]),
            ..FakeEnv::default()
        };
        let limits = Limits {
            max_turns: 2,
            deadline_ms: 1000,
        };
        let err = run_loop(&mut env, &FakeProvider, &config(), limits).expect_err("turns");
        assert!(err.contains("max turns exceeded"), "{err}");
        assert_eq!(env.bodies.len(), 2);

        let mut env = FakeEnv {
            responses: VecDeque::from([busy(), busy(), busy()]),
            ..FakeEnv::default()
        };
        let limits = Limits {
            max_turns: 10,
            deadline_ms: 15,
        };
        let err = run_loop(&mut env, &FakeProvider, &config(), limits).expect_err("deadline");
        assert!(err.starts_with("deadline passed after 2 turn(s)"), "{err}");

        let mut env = FakeEnv {
            responses: VecDeque::from([Err("HTTP 500 from https://fake/v1: oops".to_string())]),
            ..FakeEnv::default()
        };
        let err = run_loop(&mut env, &FakeProvider, &config(), LIMITS).expect_err("http");
        assert_eq!(err, "turn 1: HTTP 500 from https://fake/v1: oops");

        let mut env = FakeEnv {
            responses: VecDeque::from([Ok(json!({"in": 7}))]),
            ..FakeEnv::default()
        };
        let err = run_loop(&mut env, &FakeProvider, &config(), LIMITS).expect_err("parse");
        assert_eq!(
            err,
            "turn 1: unparseable response from https://fake/v1: no text"
        );
        assert_eq!(
            env.usage.len(),
            1,
            "usage is reported even when the rest is malformed"
        );
    }

    #[test]
    fn complete_arguments() {
        assert_eq!(
            complete_outcome(r#"{"summary":"done","artifacts":{"pr":3}}"#),
            ("done".to_string(), r#"{"pr":3}"#.to_string())
        );
        assert_eq!(
            complete_outcome(r#"{"summary":"done"}"#),
            ("done".to_string(), "{}".to_string())
        );
        assert_eq!(
            complete_outcome(r#"{"summary":"s","artifacts":"{\"a\":1}"}"#).1,
            r#"{"a":1}"#
        );
    }

    #[test]
    fn the_complete_tool_is_always_offered() {
        let specs = tool_specs([("read", "Reads a file", r#"{"type":"object"}"#)]).expect("specs");
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["read", "complete"]);
        let specs = tool_specs([("complete", "Done", "")]).expect("specs");
        assert_eq!(specs.len(), 1);
        // A router's step finishes with route_to: no `complete` is added.
        let specs = tool_specs([("route_to", "Route", "")]).expect("specs");
        assert_eq!(specs.len(), 1);
        assert!(tool_specs([("bad", "", "{")]).is_err());
    }
}
