//! A member's recovery strategy: what to do when it crashes. The engine decides with it; the
//! store keeps the strategies set at run time (a party's `overrides` column, the same JSON).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What to do when a member crashes: a built-in strategy, or `plugin:<name>` (a recovery
/// plugin decides each crash). Written as a string: `restart`, `pause`, `abort`,
/// `plugin:recovery-backoff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Re-spawn the member, up to the retry limit; then pause the role.
    Restart,
    /// Stop scheduling the role, notify, and wait for `signal_role`.
    Pause,
    /// Cancel every member; the party fails.
    Abort,
    /// Ask the named recovery plugin.
    Plugin(String),
}

impl Strategy {
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Strategy::Restart => "restart".into(),
            Strategy::Pause => "pause".into(),
            Strategy::Abort => "abort".into(),
            Strategy::Plugin(name) => format!("plugin:{name}").into(),
        }
    }

    pub fn parse(s: &str) -> Result<Strategy, String> {
        match s {
            "restart" => Ok(Strategy::Restart),
            "pause" => Ok(Strategy::Pause),
            "abort" => Ok(Strategy::Abort),
            other => match other.strip_prefix("plugin:") {
                Some(name)
                    if !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') =>
                {
                    Ok(Strategy::Plugin(name.to_string()))
                }
                _ => Err(format!(
                    "unknown recovery strategy {other:?}: use restart, pause, abort or plugin:<name>"
                )),
            },
        }
    }
}

impl Serialize for Strategy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_str())
    }
}

impl<'de> Deserialize<'de> for Strategy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Strategy::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Strategy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Strategy".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "restart, pause, abort, or plugin:<name> (a recovery plugin decides)",
            "pattern": "^(restart|pause|abort|plugin:[a-z0-9-]+)$"
        })
    }
}
