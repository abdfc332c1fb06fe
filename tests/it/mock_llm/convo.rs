//! A model request read the same way whatever its wire format (Anthropic Messages, OpenAI Chat
//! Completions and Responses, Gemini generateContent): the tools offered, the texts the model is
//! shown (system and user), and the calls it made with their results, in order. What a mock
//! model that decides from the request (`MockLlm::think`) reads.

use serde_json::Value;

/// One item of the conversation so far.
#[derive(Debug, Clone)]
pub enum Item {
    /// A text the model was shown (the system prompt, a user's or a tool's words).
    Said(String),
    /// The model's own text.
    Answered(String),
    /// A tool call the model made.
    Call { name: String, args: Value },
    /// A tool's result (its text, however the format wraps it).
    Result { text: String },
}

#[derive(Debug, Clone, Default)]
pub struct Convo {
    /// The names of the tools offered.
    pub tools: Vec<String>,
    pub items: Vec<Item>,
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(text_of).collect::<Vec<_>>().join("\n"),
        Value::Object(o) => {
            if let Some(t) = o.get("text").and_then(Value::as_str) {
                return t.to_string();
            }
            for key in ["content", "output", "response", "result"] {
                if let Some(inner) = o.get(key) {
                    return text_of(inner);
                }
            }
            v.to_string()
        }
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn args_of(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
        other => other.clone(),
    }
}

impl Convo {
    /// Reads a request body of any of the formats.
    pub fn of(body: &Value) -> Convo {
        let mut c = Convo::default();
        // Tools: Anthropic/Responses `{name}`, Chat `{function: {name}}`, Gemini
        // `{functionDeclarations: [{name}]}`.
        for t in body["tools"].as_array().into_iter().flatten() {
            if t["type"] == "namespace" {
                // Codex: an MCP server's tools in a namespace, called as `namespace::tool`.
                let ns = t["name"].as_str().unwrap_or_default();
                for inner in t["tools"].as_array().into_iter().flatten() {
                    if let Some(n) = inner["name"].as_str() {
                        c.tools.push(format!("{ns}::{n}"));
                    }
                }
            } else if let Some(n) = t["name"].as_str() {
                c.tools.push(n.to_string());
            } else if let Some(n) = t["function"]["name"].as_str() {
                c.tools.push(n.to_string());
            }
            for f in t["functionDeclarations"].as_array().into_iter().flatten() {
                if let Some(n) = f["name"].as_str() {
                    c.tools.push(n.to_string());
                }
            }
        }
        // System texts.
        for key in ["system", "instructions"] {
            if !body[key].is_null() {
                c.items.push(Item::Said(text_of(&body[key])));
            }
        }
        if !body["systemInstruction"].is_null() {
            c.items
                .push(Item::Said(text_of(&body["systemInstruction"]["parts"])));
        }
        // Anthropic and Chat: `messages`.
        for m in body["messages"].as_array().into_iter().flatten() {
            let mine = m["role"] == "assistant";
            match &m["content"] {
                Value::String(s) => c.items.push(if mine {
                    Item::Answered(s.clone())
                } else {
                    Item::Said(s.clone())
                }),
                Value::Array(parts) => {
                    for p in parts {
                        match p["type"].as_str() {
                            Some("text") => {
                                let t = p["text"].as_str().unwrap_or_default().to_string();
                                c.items.push(if mine {
                                    Item::Answered(t)
                                } else {
                                    Item::Said(t)
                                });
                            }
                            Some("tool_use") => c.items.push(Item::Call {
                                name: p["name"].as_str().unwrap_or_default().into(),
                                args: p["input"].clone(),
                            }),
                            Some("tool_result") => c.items.push(Item::Result {
                                text: text_of(&p["content"]),
                            }),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
            for call in m["tool_calls"].as_array().into_iter().flatten() {
                c.items.push(Item::Call {
                    name: call["function"]["name"].as_str().unwrap_or_default().into(),
                    args: args_of(&call["function"]["arguments"]),
                });
            }
            if m["role"] == "tool" {
                c.items.push(Item::Result {
                    text: text_of(&m["content"]),
                });
            }
        }
        // Responses: `input`.
        match &body["input"] {
            Value::String(s) => c.items.push(Item::Said(s.clone())),
            Value::Array(input) => {
                for i in input {
                    match i["type"].as_str() {
                        Some("function_call") => {
                            let name = i["name"].as_str().unwrap_or_default();
                            let name = match i["namespace"].as_str() {
                                Some(ns) if ns != "functions" => format!("{ns}::{name}"),
                                _ => name.to_string(),
                            };
                            c.items.push(Item::Call {
                                name,
                                args: args_of(&i["arguments"]),
                            });
                        }
                        Some("function_call_output") => c.items.push(Item::Result {
                            text: text_of(&i["output"]),
                        }),
                        Some("message") | None if i["role"].is_string() => {
                            let t = text_of(&i["content"]);
                            c.items.push(if i["role"] == "assistant" {
                                Item::Answered(t)
                            } else {
                                Item::Said(t)
                            });
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        // Gemini: `contents`.
        for m in body["contents"].as_array().into_iter().flatten() {
            let mine = m["role"] == "model";
            for p in m["parts"].as_array().into_iter().flatten() {
                if let Some(t) = p["text"].as_str() {
                    c.items.push(if mine {
                        Item::Answered(t.into())
                    } else {
                        Item::Said(t.into())
                    });
                } else if !p["functionCall"].is_null() {
                    c.items.push(Item::Call {
                        name: p["functionCall"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .into(),
                        args: p["functionCall"]["args"].clone(),
                    });
                } else if !p["functionResponse"].is_null() {
                    c.items.push(Item::Result {
                        text: text_of(&p["functionResponse"]["response"]),
                    });
                }
            }
        }
        c
    }

    /// Everything the model was shown, as one text.
    pub fn said(&self) -> String {
        self.items
            .iter()
            .filter_map(|i| match i {
                Item::Said(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
