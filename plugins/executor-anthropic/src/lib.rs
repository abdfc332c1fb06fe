//! `executor-anthropic`: an executor that runs the agentic loop against the Anthropic Messages
//! API (`POST /v1/messages`), non-streaming.

// The generated bindings and the exported entry points are FFI, hence unsafe; our code is not.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "executor" });
    use super::Anthropic;
    export!(Anthropic);
}

use bindings::exports::troupe::plugin::execution::Task;
use executor_common::{
    ExecutorConfig, Provider, Reply, ToolCall, ToolSpec, join_url, tool_result_text, tool_specs,
    u64_field,
};
use serde_json::{Map, Value, json};

const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
const DEFAULT_MAX_TOKENS: u64 = 4096;
const API_VERSION: &str = "2023-06-01";

/// The Messages API wire format for one task.
struct Messages {
    base_url: String,
    model: String,
    max_tokens: u64,
    temperature: Option<f64>,
    system_prompt: Option<String>,
    prompt: String,
    tools: Vec<ToolSpec>,
}

impl Messages {
    fn new(config: &ExecutorConfig, task: &Task) -> Result<Self, String> {
        let tools = tool_specs(task.tools.iter().map(|t| {
            (
                t.name.as_str(),
                t.description.as_str(),
                t.parameters.as_str(),
            )
        }))?;
        Ok(Self {
            base_url: config.base_url.clone(),
            model: config.model_for(task.model.as_deref(), DEFAULT_MODEL),
            max_tokens: config.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            temperature: config.temperature,
            system_prompt: task.system_prompt.clone().filter(|s| !s.is_empty()),
            prompt: task.prompt.clone(),
            tools,
        })
    }
}

impl Provider for Messages {
    fn url(&self) -> String {
        join_url(&self.base_url, "/v1/messages")
    }

    fn headers(&self) -> Vec<(&'static str, &'static str)> {
        // No x-api-key header: the host adds the key.
        vec![
            ("anthropic-version", API_VERSION),
            ("content-type", "application/json"),
        ]
    }

    fn initial_messages(&self) -> Vec<Value> {
        vec![json!({"role": "user", "content": self.prompt})]
    }

    fn body(&self, messages: &[Value]) -> Value {
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.schema,
                })
            })
            .collect();
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("max_tokens".into(), json!(self.max_tokens));
        if let Some(system) = &self.system_prompt {
            body.insert("system".into(), json!(system));
        }
        body.insert("messages".into(), json!(messages));
        body.insert("tools".into(), json!(tools));
        if let Some(temperature) = self.temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        Value::Object(body)
    }

    fn usage(&self, response: &Value) -> (u64, u64) {
        let usage = response.get("usage").unwrap_or(&Value::Null);
        // Cached prompt tokens are counted apart from `input_tokens`; they are input too.
        let input = u64_field(usage, "input_tokens")
            + u64_field(usage, "cache_creation_input_tokens")
            + u64_field(usage, "cache_read_input_tokens");
        (input, u64_field(usage, "output_tokens"))
    }

    fn parse(&self, response: &Value) -> Result<Reply, String> {
        let blocks = response
            .get("content")
            .and_then(Value::as_array)
            .ok_or("no `content` list")?;
        let mut texts = Vec::new();
        let mut tool_calls = Vec::new();
        for (i, block) in blocks.iter().enumerate() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = block
                        .get("text")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("`content[{i}]` (text) has no `text`"))?;
                    if !text.is_empty() {
                        texts.push(text);
                    }
                }
                Some("tool_use") => {
                    let field = |key: &str| {
                        block
                            .get(key)
                            .and_then(Value::as_str)
                            .ok_or_else(|| format!("`content[{i}]` (tool_use) has no `{key}`"))
                    };
                    let arguments = match block.get("input") {
                        None | Some(Value::Null) => "{}".to_string(),
                        Some(input) => input.to_string(),
                    };
                    tool_calls.push(ToolCall {
                        id: field("id")?.to_string(),
                        name: field("name")?.to_string(),
                        arguments,
                    });
                }
                // Thinking and other blocks are kept in the echoed message but not read.
                Some(_) => {}
                None => return Err(format!("`content[{i}]` has no `type`")),
            }
        }
        let stop_reason = response
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Reply {
            text: texts.join("\n\n"),
            tool_calls,
            // The API wants the assistant's content back exactly as it came.
            assistant: json!({"role": "assistant", "content": blocks}),
            stop_reason,
        })
    }

    fn tool_results(&self, results: &[(ToolCall, Result<String, String>)]) -> Vec<Value> {
        let blocks: Vec<Value> = results
            .iter()
            .map(|(call, result)| {
                let mut content = tool_result_text(result);
                if content.is_empty() {
                    // The API refuses empty text.
                    content = "(no output)".to_string();
                }
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": content,
                });
                if result.is_err() {
                    block["is_error"] = json!(true);
                }
                block
            })
            .collect();
        vec![json!({"role": "user", "content": blocks})]
    }
}

executor_common::executor_guest!(Anthropic, Messages, DEFAULT_BASE_URL);

#[cfg(test)]
mod tests {
    use super::*;
    use bindings::exports::troupe::plugin::execution::ToolSchema;

    fn provider(config: &str, system: Option<&str>) -> Messages {
        let config = ExecutorConfig::parse(config, DEFAULT_BASE_URL).expect("config");
        let task = Task {
            prompt: "Fix the bug".to_string(),
            system_prompt: system.map(str::to_string),
            model: None,
            tools: vec![ToolSchema {
                name: "read_file".to_string(),
                description: "Reads a file".to_string(),
                parameters: r#"{"type":"object"}"#.to_string(),
            }],
            max_turns: 10,
            deadline_ms: u64::MAX,
        };
        Messages::new(&config, &task).expect("provider")
    }

    #[test]
    fn request_shape() {
        let p = provider("{}", Some("Be careful."));
        assert_eq!(p.url(), "https://api.anthropic.com/v1/messages");
        assert_eq!(
            p.headers(),
            [
                ("anthropic-version", "2023-06-01"),
                ("content-type", "application/json")
            ]
        );
        let body = p.body(&p.initial_messages());
        assert_eq!(body["model"], "claude-sonnet-4-5");
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(body["system"], "Be careful.");
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": "Fix the bug"}])
        );
        assert_eq!(
            body["tools"],
            json!([
                {"name": "read_file", "description": "Reads a file", "input_schema": {"type": "object"}},
                {"name": "complete", "description": p.tools[1].description, "input_schema": p.tools[1].schema},
            ])
        );
        let body = provider(r#"{"max_tokens":100,"temperature":0}"#, None).body(&[]);
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["temperature"], 0.0);
        assert!(body.get("system").is_none());
    }

    #[test]
    fn replies_with_tool_use() {
        let p = provider("{}", None);
        let response = json!({
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.rs"}},
                {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 100, "cache_read_input_tokens": 50, "output_tokens": 20}
        });
        assert_eq!(p.usage(&response), (150, 20));
        let reply = p.parse(&response).expect("parses");
        assert_eq!(reply.text, "Let me look.");
        assert_eq!(reply.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(reply.tool_calls.len(), 2);
        assert_eq!(reply.tool_calls[0].arguments, r#"{"path":"a.rs"}"#);
        assert_eq!(reply.assistant["content"], response["content"]);
        let results = p.tool_results(&[
            (reply.tool_calls[0].clone(), Ok("fn main() {}".to_string())),
            (reply.tool_calls[1].clone(), Err("denied".to_string())),
        ]);
        assert_eq!(
            results,
            [json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fn main() {}"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "error: denied", "is_error": true},
            ]})]
        );
    }

    #[test]
    fn plain_answers_and_malformed_responses() {
        let p = provider("{}", None);
        let reply = p
            .parse(
                &json!({"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}),
            )
            .expect("parses");
        assert_eq!(reply.text, "Done.");
        assert!(reply.tool_calls.is_empty());
        assert_eq!(
            p.parse(&json!({"type": "error"})).expect_err("no content"),
            "no `content` list"
        );
        assert!(
            p.parse(&json!({"content": [{"type": "tool_use", "name": "x"}]}))
                .expect_err("no id")
                .contains("no `id`")
        );
    }
}
