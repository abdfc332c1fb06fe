//! `executor-openai`: an executor that runs the agentic loop against an OpenAI-compatible
//! Chat Completions API (OpenAI, OpenRouter, LiteLLM, Ollama, vLLM), non-streaming.

// The generated bindings and the exported entry points are FFI, hence unsafe; our code is not.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "executor" });
    use super::OpenAi;
    export!(OpenAi);
}

use bindings::exports::troupe::plugin::execution::Task;
use executor_common::{
    ExecutorConfig, Provider, Reply, ToolCall, ToolSpec, join_url, tool_result_text, tool_specs,
    u64_field,
};
use serde_json::{Map, Value, json};

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// The Chat Completions wire format for one task.
struct ChatCompletions {
    base_url: String,
    model: String,
    max_tokens: Option<u64>,
    temperature: Option<f64>,
    system_prompt: Option<String>,
    prompt: String,
    tools: Vec<ToolSpec>,
}

impl ChatCompletions {
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
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            system_prompt: task.system_prompt.clone().filter(|s| !s.is_empty()),
            prompt: task.prompt.clone(),
            tools,
        })
    }
}

/// The text of a message's `content`: a string, null, or a list of `{type: "text", text}`
/// parts.
fn content_text(content: Option<&Value>) -> Result<String, String> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("")),
        Some(_) => Err("`message.content` is neither a string, null nor a list".to_string()),
    }
}

impl Provider for ChatCompletions {
    fn url(&self) -> String {
        join_url(&self.base_url, "/chat/completions")
    }

    fn headers(&self) -> Vec<(&'static str, &'static str)> {
        // No authorization header: the host adds the key.
        vec![
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ]
    }

    fn initial_messages(&self) -> Vec<Value> {
        let mut messages = Vec::new();
        if let Some(system) = &self.system_prompt {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": self.prompt}));
        messages
    }

    fn body(&self, messages: &[Value]) -> Value {
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.schema,
                    }
                })
            })
            .collect();
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("messages".into(), json!(messages));
        body.insert("tools".into(), json!(tools));
        if let Some(max_tokens) = self.max_tokens {
            body.insert("max_tokens".into(), json!(max_tokens));
        }
        if let Some(temperature) = self.temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        Value::Object(body)
    }

    fn usage(&self, response: &Value) -> (u64, u64) {
        let usage = response.get("usage").unwrap_or(&Value::Null);
        (
            u64_field(usage, "prompt_tokens"),
            u64_field(usage, "completion_tokens"),
        )
    }

    fn parse(&self, response: &Value) -> Result<Reply, String> {
        let choice = response
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|choices| choices.first())
            .ok_or("no `choices[0]`")?;
        let message = choice
            .get("message")
            .filter(|m| m.is_object())
            .ok_or("no `choices[0].message` object")?;
        let text = content_text(message.get("content"))?;
        let stop_reason = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut tool_calls = Vec::new();
        match message.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for (i, call) in calls.iter().enumerate() {
                    let function = call
                        .get("function")
                        .ok_or_else(|| format!("`tool_calls[{i}]` has no `function`"))?;
                    let name = function
                        .get("name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("`tool_calls[{i}].function` has no `name`"))?;
                    let arguments = match function.get("arguments") {
                        Some(Value::String(args)) if args.trim().is_empty() => "{}".to_string(),
                        Some(Value::String(args)) => args.clone(),
                        // Some servers (older Ollama) send an object.
                        Some(args @ Value::Object(_)) => args.to_string(),
                        None | Some(Value::Null) => "{}".to_string(),
                        Some(_) => {
                            return Err(format!(
                                "`tool_calls[{i}].function.arguments` is not a string"
                            ));
                        }
                    };
                    // Some servers leave out the id; the reply must still pair results up.
                    let id = call
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty())
                        .map_or_else(|| format!("call_{i}"), str::to_string);
                    tool_calls.push(ToolCall {
                        id,
                        name: name.to_string(),
                        arguments,
                    });
                }
            }
            Some(_) => return Err("`message.tool_calls` is not a list".to_string()),
        }
        // Echo only the fields every compatible server accepts back.
        let assistant = if tool_calls.is_empty() {
            json!({"role": "assistant", "content": text})
        } else {
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })
                })
                .collect();
            let content = if text.is_empty() {
                Value::Null
            } else {
                json!(text)
            };
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        };
        Ok(Reply {
            text,
            tool_calls,
            assistant,
            stop_reason,
        })
    }

    fn tool_results(&self, results: &[(ToolCall, Result<String, String>)]) -> Vec<Value> {
        results
            .iter()
            .map(|(call, result)| {
                json!({
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": tool_result_text(result),
                })
            })
            .collect()
    }
}

executor_common::executor_guest!(OpenAi, ChatCompletions, DEFAULT_BASE_URL);

#[cfg(test)]
mod tests {
    use super::*;
    use bindings::exports::troupe::plugin::execution::ToolSchema;

    fn provider(config: &str, model: Option<&str>) -> ChatCompletions {
        let config = ExecutorConfig::parse(config, DEFAULT_BASE_URL).expect("config");
        let task = Task {
            prompt: "Fix the bug".to_string(),
            system_prompt: Some("You are careful.".to_string()),
            model: model.map(str::to_string),
            tools: vec![ToolSchema {
                name: "read_file".to_string(),
                description: "Reads a file".to_string(),
                parameters: r#"{"type":"object","properties":{"path":{"type":"string"}}}"#
                    .to_string(),
            }],
            max_turns: 10,
            deadline_ms: u64::MAX,
        };
        ChatCompletions::new(&config, &task).expect("provider")
    }

    #[test]
    fn request_shape() {
        let p = provider(
            r#"{"base_url":"http://localhost:11434/v1/","max_tokens":50}"#,
            None,
        );
        assert_eq!(p.url(), "http://localhost:11434/v1/chat/completions");
        assert!(
            p.headers()
                .iter()
                .all(|(name, _)| !name.eq_ignore_ascii_case("authorization"))
        );
        let body = p.body(&p.initial_messages());
        assert_eq!(body["model"], "gpt-4o-mini");
        assert_eq!(body["max_tokens"], 50);
        assert!(body.get("temperature").is_none());
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "You are careful."},
                {"role": "user", "content": "Fix the bug"},
            ])
        );
        assert_eq!(body["tools"][0]["function"]["name"], "read_file");
        assert_eq!(
            body["tools"][0]["function"]["parameters"]["properties"]["path"]["type"],
            "string"
        );
        assert_eq!(body["tools"][1]["function"]["name"], "complete");
        assert_eq!(provider(r#"{"model":"m"}"#, Some("t")).model, "t");
        assert_eq!(provider(r#"{"model":"m"}"#, None).model, "m");
    }

    #[test]
    fn replies_with_tool_calls() {
        let p = provider("{}", None);
        let response = json!({
            "choices": [{
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": null,
                    "refusal": null,
                    "tool_calls": [
                        {"id": "call_a", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\"path\":\"x\"}"}},
                        {"type": "function", "function": {"name": "complete", "arguments": {"summary": "s"}}},
                    ]
                }
            }],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        });
        assert_eq!(p.usage(&response), (12, 3));
        let reply = p.parse(&response).expect("parses");
        assert_eq!(reply.stop_reason.as_deref(), Some("tool_calls"));
        assert_eq!(reply.tool_calls[0].arguments, r#"{"path":"x"}"#);
        assert_eq!(reply.tool_calls[1].id, "call_1");
        assert_eq!(reply.tool_calls[1].arguments, r#"{"summary":"s"}"#);
        assert_eq!(
            reply.assistant,
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\":\"x\"}"}},
                {"id": "call_1", "type": "function",
                 "function": {"name": "complete", "arguments": "{\"summary\":\"s\"}"}},
            ]})
        );
        let results = p.tool_results(&[(reply.tool_calls[0].clone(), Err("no such file".into()))]);
        assert_eq!(
            results,
            [json!({"role": "tool", "tool_call_id": "call_a", "content": "error: no such file"})]
        );
    }

    #[test]
    fn plain_answers_and_malformed_responses() {
        let p = provider("{}", None);
        let reply = p
            .parse(
                &json!({"choices": [{"message": {"role": "assistant", "content": "All done."}}]}),
            )
            .expect("parses");
        assert_eq!(reply.text, "All done.");
        assert!(reply.tool_calls.is_empty());
        assert_eq!(p.usage(&json!({})), (0, 0));
        assert_eq!(
            p.parse(&json!({"error": {"message": "x"}}))
                .expect_err("no choices"),
            "no `choices[0]`"
        );
        assert!(
            p.parse(&json!({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}))
                .expect_err("no name")
                .contains("no `name`")
        );
    }
}
