//! The configuration keys both executors understand, read from `host::config()`.

use serde_json::{Map, Value};

use crate::http::parse_url;

/// The configuration keys both executors understand (`host::config()`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutorConfig {
    pub base_url: String,
    pub model: Option<String>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub input_cost_per_mtok: f64,
    pub output_cost_per_mtok: f64,
}

impl ExecutorConfig {
    /// Parses the config JSON object; every key is optional. A key of the wrong type is an
    /// error that names it.
    pub fn parse(json: &str, default_base_url: &str) -> Result<Self, String> {
        let value: Value = if json.trim().is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_str(json).map_err(|e| format!("config is not JSON: {e}"))?
        };
        let Value::Object(map) = value else {
            return Err("config is not a JSON object".to_string());
        };
        let base_url = match map.get("base_url") {
            None | Some(Value::Null) => default_base_url.to_string(),
            Some(Value::String(url)) => {
                parse_url(url).map_err(|e| format!("config `base_url`: {e}"))?;
                url.clone()
            }
            Some(_) => return Err("config `base_url` must be a string".to_string()),
        };
        let model = match map.get("model") {
            None | Some(Value::Null) => None,
            Some(Value::String(model)) if !model.is_empty() => Some(model.clone()),
            Some(_) => return Err("config `model` must be a non-empty string".to_string()),
        };
        let max_tokens = match map.get("max_tokens") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => Some(n),
                _ => return Err("config `max_tokens` must be a positive integer".to_string()),
            },
        };
        let temperature = match map.get("temperature") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(t) if t.is_finite() && t >= 0.0 => Some(t),
                _ => return Err("config `temperature` must be a number ≥ 0".to_string()),
            },
        };
        let cost = |key: &str| match map.get(key) {
            None | Some(Value::Null) => Ok(0.0),
            Some(v) => match v.as_f64() {
                Some(c) if c.is_finite() && c >= 0.0 => Ok(c),
                _ => Err(format!("config `{key}` must be a number ≥ 0")),
            },
        };
        Ok(Self {
            base_url,
            model,
            max_tokens,
            temperature,
            input_cost_per_mtok: cost("input_cost_per_mtok")?,
            output_cost_per_mtok: cost("output_cost_per_mtok")?,
        })
    }

    /// The task's model if it names one, else the configured one, else `fallback`.
    pub fn model_for(&self, task_model: Option<&str>, fallback: &str) -> String {
        task_model
            .filter(|m| !m.is_empty())
            .or(self.model.as_deref())
            .unwrap_or(fallback)
            .to_string()
    }

    /// US dollars for this many tokens at the configured rates.
    pub fn cost_usd(&self, input_tokens: u64, output_tokens: u64) -> f64 {
        (input_tokens as f64 * self.input_cost_per_mtok
            + output_tokens as f64 * self.output_cost_per_mtok)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_errors() {
        let cfg = ExecutorConfig::parse("{}", "https://x/v1").expect("empty config");
        assert_eq!(cfg.base_url, "https://x/v1");
        assert_eq!(cfg.model_for(None, "m0"), "m0");
        assert_eq!(cfg.cost_usd(1000, 1000), 0.0);
        let cfg = ExecutorConfig::parse(
            r#"{"model":"m1","max_tokens":100,"temperature":0.5,"input_cost_per_mtok":3,"output_cost_per_mtok":15}"#,
            "https://x",
        )
        .expect("full config");
        assert_eq!(cfg.model_for(None, "m0"), "m1");
        assert_eq!(cfg.model_for(Some("m2"), "m0"), "m2");
        assert_eq!(cfg.max_tokens, Some(100));
        assert!((cfg.cost_usd(1_000_000, 100_000) - 4.5).abs() < 1e-9);
        for bad in [
            r#"{"max_tokens":-1}"#,
            r#"{"base_url":"api.openai.com"}"#,
            r#"{"temperature":"hot"}"#,
            "[]",
        ] {
            assert!(ExecutorConfig::parse(bad, "https://x").is_err(), "{bad}");
        }
    }
}
