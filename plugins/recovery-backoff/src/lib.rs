//! `recovery-backoff`: a recovery strategy that restarts a crashed party member after an
//! exponentially growing delay, and pauses (telling someone) or aborts once it gives up.

// The generated bindings and the exported entry points are FFI, hence unsafe; our code is not.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "recovery" });
    use super::Backoff;
    export!(Backoff);
}

use bindings::exports::troupe::plugin::recovery_strategy::{
    CrashContext, Decision, Guest, NotifyTarget,
};
use bindings::troupe::plugin::host::{self, Level};
use serde_json::Value;

/// What to do once the member has crashed more than `give_up_after` times.
#[derive(Debug, Clone, Copy, PartialEq)]
enum OnGiveUp {
    Pause,
    Abort,
}

/// The plugin's configuration; every key is optional.
#[derive(Debug, Clone, PartialEq)]
struct Config {
    base_delay_ms: u64,
    factor: f64,
    max_delay_ms: u64,
    /// `None`: the context's retry limit.
    give_up_after: Option<u32>,
    escalate_to: NotifyTarget,
    on_give_up: OnGiveUp,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            base_delay_ms: 1000,
            factor: 2.0,
            max_delay_ms: 60_000,
            give_up_after: None,
            escalate_to: NotifyTarget::User,
            on_give_up: OnGiveUp::Pause,
        }
    }
}

impl Config {
    /// Parses the config object. A key that is missing keeps its default; a key with a bad
    /// value keeps its default too and is reported in the returned warnings.
    fn parse(json: &str) -> (Self, Vec<String>) {
        let mut config = Self::default();
        let mut warnings = Vec::new();
        let map = match serde_json::from_str::<Value>(json) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                warnings.push("config is not a JSON object; using defaults".to_string());
                return (config, warnings);
            }
            Err(_) if json.trim().is_empty() => return (config, warnings),
            Err(e) => {
                warnings.push(format!("config is not JSON ({e}); using defaults"));
                return (config, warnings);
            }
        };
        let mut bad = |key: &str, expected: &str| {
            warnings.push(format!(
                "config `{key}` must be {expected}; using the default"
            ));
        };
        if let Some(v) = map.get("base_delay_ms") {
            match v.as_u64() {
                Some(ms) => config.base_delay_ms = ms,
                None => bad("base_delay_ms", "a non-negative integer"),
            }
        }
        if let Some(v) = map.get("factor") {
            match v.as_f64() {
                Some(f) if f.is_finite() && f > 0.0 => config.factor = f,
                _ => bad("factor", "a positive number"),
            }
        }
        if let Some(v) = map.get("max_delay_ms") {
            match v.as_u64() {
                Some(ms) => config.max_delay_ms = ms,
                None => bad("max_delay_ms", "a non-negative integer"),
            }
        }
        if let Some(v) = map.get("give_up_after") {
            match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => config.give_up_after = Some(n),
                None if v.is_null() => {}
                None => bad("give_up_after", "a non-negative integer"),
            }
        }
        if let Some(v) = map.get("escalate_to") {
            match v.as_str() {
                Some("leader") => config.escalate_to = NotifyTarget::Leader,
                Some("user") => config.escalate_to = NotifyTarget::User,
                Some("party") => config.escalate_to = NotifyTarget::Party,
                _ => bad("escalate_to", "\"leader\", \"user\" or \"party\""),
            }
        }
        if let Some(v) = map.get("on_give_up") {
            match v.as_str() {
                Some("pause") => config.on_give_up = OnGiveUp::Pause,
                Some("abort") => config.on_give_up = OnGiveUp::Abort,
                _ => bad("on_give_up", "\"pause\" or \"abort\""),
            }
        }
        (config, warnings)
    }

    /// `min(base * factor^(n-1), max)` milliseconds before restart number `n` (n ≥ 1).
    fn delay_ms(&self, crash_count: u32) -> u64 {
        let exponent = i32::try_from(crash_count.max(1) - 1).unwrap_or(i32::MAX);
        let delay = self.base_delay_ms as f64 * self.factor.powi(exponent);
        let max = self.max_delay_ms as f64;
        // `as` saturates; NaN cannot occur (finite positive factor) but would give 0.
        if delay >= max {
            self.max_delay_ms
        } else {
            delay as u64
        }
    }

    /// The decision for a crash, given the context's crash count and retry limit.
    fn decide(&self, crash_count: u32, retry_limit: u32) -> Decision {
        let give_up_after = self.give_up_after.unwrap_or(retry_limit);
        if crash_count <= give_up_after {
            Decision::Restart(self.delay_ms(crash_count))
        } else {
            match self.on_give_up {
                OnGiveUp::Pause => Decision::Pause(self.escalate_to),
                OnGiveUp::Abort => Decision::Abort,
            }
        }
    }
}

fn target_name(target: NotifyTarget) -> &'static str {
    match target {
        NotifyTarget::Leader => "leader",
        NotifyTarget::User => "user",
        NotifyTarget::Party => "party",
    }
}

struct Backoff;

impl Guest for Backoff {
    fn decide(ctx: CrashContext) -> Decision {
        let (config, warnings) = Config::parse(&host::config());
        for warning in &warnings {
            host::log(Level::Warn, warning);
        }
        let decision = config.decide(ctx.crash_count, ctx.retry_limit);
        let limit = config.give_up_after.unwrap_or(ctx.retry_limit);
        let what = format!(
            "{} in party {}: crash {} of at most {limit} restarts ({})",
            ctx.member, ctx.party, ctx.crash_count, ctx.reason
        );
        match decision {
            Decision::Restart(ms) => {
                host::log(Level::Info, &format!("{what}: restarting in {ms} ms"))
            }
            Decision::Pause(target) => host::log(
                Level::Warn,
                &format!(
                    "{what}: giving up, pausing the role and notifying the {}",
                    target_name(target)
                ),
            ),
            Decision::Abort => host::log(
                Level::Warn,
                &format!("{what}: giving up, aborting the party"),
            ),
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restart_ms(decision: Decision) -> Option<u64> {
        match decision {
            Decision::Restart(ms) => Some(ms),
            _ => None,
        }
    }

    #[test]
    fn defaults_double_up_to_the_retry_limit_then_pause_for_the_user() {
        let (config, warnings) = Config::parse("{}");
        assert!(warnings.is_empty());
        let delays: Vec<_> = (1..=3).map(|n| restart_ms(config.decide(n, 3))).collect();
        assert_eq!(delays, [Some(1000), Some(2000), Some(4000)]);
        assert!(matches!(
            config.decide(4, 3),
            Decision::Pause(NotifyTarget::User)
        ));
        assert!(matches!(
            config.decide(1, 0),
            Decision::Pause(NotifyTarget::User)
        ));
    }

    #[test]
    fn delay_is_capped() {
        let (config, _) = Config::parse(r#"{"base_delay_ms":500,"factor":3,"max_delay_ms":10000}"#);
        assert_eq!(config.delay_ms(1), 500);
        assert_eq!(config.delay_ms(3), 4500);
        assert_eq!(config.delay_ms(4), 10_000);
        assert_eq!(config.delay_ms(u32::MAX), 10_000);
        assert_eq!(config.delay_ms(0), 500);
    }

    #[test]
    fn configured_give_up() {
        let (config, warnings) =
            Config::parse(r#"{"give_up_after":1,"on_give_up":"abort","escalate_to":"leader"}"#);
        assert!(warnings.is_empty());
        assert_eq!(restart_ms(config.decide(1, 10)), Some(1000));
        assert!(matches!(config.decide(2, 10), Decision::Abort));
        let (config, _) = Config::parse(r#"{"escalate_to":"party","give_up_after":0}"#);
        assert!(matches!(
            config.decide(1, 5),
            Decision::Pause(NotifyTarget::Party)
        ));
    }

    #[test]
    fn bad_values_keep_defaults_and_warn() {
        let (config, warnings) =
            Config::parse(r#"{"factor":-1,"escalate_to":"boss","base_delay_ms":"1s"}"#);
        assert_eq!(config, Config::default());
        assert_eq!(warnings.len(), 3);
        let (config, warnings) = Config::parse("not json");
        assert_eq!(config, Config::default());
        assert_eq!(warnings.len(), 1);
        let (_, warnings) = Config::parse("");
        assert!(warnings.is_empty());
    }
}
