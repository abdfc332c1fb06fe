//! Property-based fuzzing on stable Rust (proptest) for Troupe's doors: [`run`], the loop every
//! fuzz target goes through (a short, fixed-seed corpus under `cargo test`; a timed pass with
//! fresh seeds under `scripts/fuzz`), and strategies for arbitrary JSON, JSON shaped after a
//! JSON Schema (with wrong types, missing and extra fields), and strings that tend to break
//! parsers. A dev-dependency only.

use std::fmt::Debug;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseResult, TestError, TestRunner};
use serde_json::{Map, Number, Value};

pub use proptest;

/// The environment variable that turns a target's `cargo test` run into a timed fuzz pass.
pub const FUZZ_SECS: &str = "TROUPE_FUZZ_SECS";
/// The timed pass's seed (`scripts/fuzz` draws one per run and prints it); without it, a fresh
/// one. The same seed draws the same batches again.
pub const FUZZ_SEED: &str = "TROUPE_FUZZ_SEED";

/// Cases per batch in a timed pass (each batch its own seed, derived from the pass's; once the
/// budget has passed, the rest of the batch is drawn but not run).
const BATCH: u32 = 64;

/// Runs `test` on inputs drawn from `strategy` and prints `fuzz <target>: <n> cases, <f>
/// failures`.
///
/// Under `cargo test` it runs `ci_cases` cases (or `PROPTEST_CASES`) from a seed fixed per
/// target (or `PROPTEST_RNG_SEED`), so CI always runs the same short corpus. With
/// `TROUPE_FUZZ_SECS=<s>` (what `scripts/fuzz` sets) it runs batches of fresh cases for that
/// many seconds, from the seed `TROUPE_FUZZ_SEED` (else a random one), which it prints first:
/// `fuzz <target>: seed <n>`. A failure is shrunk to a minimal input and the test panics with
/// it, naming the seed of the pass and of its batch (`PROPTEST_RNG_SEED=<batch seed>
/// PROPTEST_CASES=64` runs that batch alone).
pub fn run<S>(target: &str, ci_cases: u32, strategy: S, test: impl Fn(S::Value) -> TestCaseResult)
where
    S: Strategy,
    S::Value: Debug,
{
    let budget = std::env::var(FUZZ_SECS)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok());
    let ci_cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(ci_cases);
    let fixed_seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| seed_of(target));
    let pass_seed = budget.map(|_| {
        let seed = std::env::var(FUZZ_SEED)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(fresh_seed);
        println!("fuzz {target}: seed {seed} ({FUZZ_SEED}={seed} draws these cases again)");
        seed
    });
    let started = Instant::now();
    let spent = || budget.is_some_and(|b| started.elapsed() >= b);
    let cases = std::cell::Cell::new(0u64);
    let counted = |v: S::Value| {
        // A timed pass stops at its budget, not at the end of a batch.
        if spent() {
            return Ok(());
        }
        cases.set(cases.get() + 1);
        test(v)
    };
    for batch in 0u64.. {
        // Each target its own cases from the same pass seed.
        let seed = match pass_seed {
            Some(pass) => mix(pass ^ seed_of(target), batch),
            None => fixed_seed,
        };
        let config = Config {
            cases: if budget.is_some() { BATCH } else { ci_cases },
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed),
            max_shrink_time: 120_000,
            max_shrink_iters: 2_000,
            max_global_rejects: 100_000,
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        let outcome = runner.run(&strategy, counted);
        if let Err(e) = outcome {
            println!(
                "fuzz {target}: {} cases, 1 failures ({:.0} s)",
                cases.get(),
                started.elapsed().as_secs_f64()
            );
            let again = match pass_seed {
                Some(pass) => format!(
                    "{FUZZ_SEED}={pass} (batch {batch}; alone: PROPTEST_RNG_SEED={seed} \
                     PROPTEST_CASES={BATCH})"
                ),
                None => format!("PROPTEST_RNG_SEED={seed}"),
            };
            match e {
                TestError::Fail(why, input) => {
                    panic!("fuzz {target} failed: {why}\nseed: {again}\nminimal input: {input:#?}")
                }
                TestError::Abort(why) => panic!("fuzz {target} aborted: {why}\nseed: {again}"),
            }
        }
        if budget.is_none() || spent() {
            break;
        }
    }
    println!(
        "fuzz {target}: {} cases, 0 failures ({:.0} s)",
        cases.get(),
        started.elapsed().as_secs_f64()
    );
}

/// A seed per target name (FNV-1a), so each target's CI corpus is fixed and distinct.
fn seed_of(target: &str) -> u64 {
    target.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The seed of batch `n` of a pass seeded `seed` (SplitMix64's finalizer over their sum).
fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seed no earlier pass had: the process's random hash keys and the time.
fn fresh_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(now.as_nanos());
    h.write_u32(std::process::id());
    h.finish()
}

/// Strings that tend to break parsers and handlers: empty, blank, huge, control characters,
/// paths that climb out, glob and shell metacharacters, right-to-left marks, long lines.
pub fn nasty_string() -> BoxedStrategy<String> {
    prop_oneof![
        Just(String::new()),
        Just(" ".into()),
        Just("\0".into()),
        Just("..".into()),
        Just("../../../../etc/passwd".into()),
        Just("/".into()),
        Just("/dev/zero".into()),
        Just("*".into()),
        Just("**/*".into()),
        Just("$(touch /tmp/x)".into()),
        Just("'; DROP TABLE sessions; --".into()),
        Just("\u{202e}gnp.exe".into()),
        Just("\u{fffd}\u{10ffff}".into()),
        Just("troupe.".into()),
        Just("plugin:".into()),
        Just("acp:".into()),
        Just("wasm:".into()),
        Just("-1".into()),
        Just("1e999".into()),
        Just("\r\n\r\nContent-Length: 5\r\n\r\n".into()),
        (1usize..5).prop_map(|n| "é".repeat(n * 1000 + 1)),
        (1usize..4).prop_map(|n| "x".repeat(n * 70_000)),
    ]
    .boxed()
}

/// Any string: mostly short, sometimes a [`nasty_string`].
pub fn string() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-z0-9_.:/-]{0,16}",
        3 => any::<String>(),
        2 => nasty_string(),
    ]
    .boxed()
}

/// A string: mostly from `pool` (ids and names the target knows are real), else [`string`].
pub fn string_from(pool: Vec<String>) -> BoxedStrategy<String> {
    if pool.is_empty() {
        return string();
    }
    prop_oneof![1 => proptest::sample::select(pool), 1 => string()].boxed()
}

/// Numbers at and past the edges: zero, ±1, the integer limits, huge and tiny floats.
pub fn number() -> BoxedStrategy<Value> {
    let edge: Vec<Value> = vec![
        0.into(),
        1.into(),
        (-1).into(),
        i64::MAX.into(),
        i64::MIN.into(),
        u64::MAX.into(),
        u32::MAX.into(),
        (u64::from(u32::MAX) + 1).into(),
        Value::Number(Number::from_f64(1e300).unwrap_or_else(|| 0.into())),
        Value::Number(Number::from_f64(-1e300).unwrap_or_else(|| 0.into())),
        Value::Number(Number::from_f64(1e-300).unwrap_or_else(|| 0.into())),
        Value::Number(Number::from_f64(0.5).unwrap_or_else(|| 0.into())),
        Value::Number(Number::from_f64(f64::MAX).unwrap_or_else(|| 0.into())),
        Value::Number(Number::from_f64(18446744073709551616.0).unwrap_or_else(|| 0.into())),
    ];
    prop_oneof![
        3 => proptest::sample::select(edge),
        2 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        2 => (0i64..1000).prop_map(Value::from),
        1 => any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
    ]
    .boxed()
}

/// Any JSON value, nested a few levels.
pub fn json() -> BoxedStrategy<Value> {
    json_from(Vec::new())
}

/// Any JSON value whose strings come partly from `pool`.
pub fn json_from(pool: Vec<String>) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string_from(pool.clone()).prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

fn key() -> BoxedStrategy<String> {
    prop_oneof![3 => "[a-z_]{1,12}", 1 => string()].boxed()
}

/// Values shaped after a JSON Schema (schemars' output: `type`, `enum`, `const`, `properties`,
/// `required`, `items`, `additionalProperties`, `anyOf`/`oneOf`, `$ref` into `$defs`): mostly
/// fitting, with each part sometimes of the wrong type, required fields sometimes missing and
/// unknown fields sometimes added. Strings come partly from `pool`.
pub fn shaped(schema: &Value, pool: Vec<String>) -> BoxedStrategy<Value> {
    Shaper { root: schema, pool }.node(schema, 0)
}

struct Shaper<'a> {
    root: &'a Value,
    pool: Vec<String>,
}

impl Shaper<'_> {
    fn any(&self) -> BoxedStrategy<Value> {
        json_from(self.pool.clone())
    }

    fn resolve<'s>(&'s self, mut schema: &'s Value) -> &'s Value {
        for _ in 0..8 {
            let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let Some(target) = reference
                .strip_prefix('#')
                .and_then(|pointer| self.root.pointer(pointer))
            else {
                break;
            };
            schema = target;
        }
        schema
    }

    /// A value for `schema`: fitting most of the time, else anything.
    fn node(&self, schema: &Value, depth: u32) -> BoxedStrategy<Value> {
        if depth > 5 {
            return self.any();
        }
        let fitting = self.fitting(self.resolve(schema), depth);
        prop_oneof![9 => fitting, 1 => self.any()].boxed()
    }

    fn fitting(&self, s: &Value, depth: u32) -> BoxedStrategy<Value> {
        if let Some(c) = s.get("const") {
            return Just(c.clone()).boxed();
        }
        if let Some(options) = s.get("enum").and_then(Value::as_array)
            && !options.is_empty()
        {
            return proptest::sample::select(options.clone()).boxed();
        }
        for union in ["anyOf", "oneOf"] {
            if let Some(options) = s.get(union).and_then(Value::as_array)
                && !options.is_empty()
            {
                let arms: Vec<BoxedStrategy<Value>> =
                    options.iter().map(|o| self.node(o, depth + 1)).collect();
                return proptest::strategy::Union::new(arms).boxed();
            }
        }
        match s.get("type") {
            Some(Value::String(t)) => self.of_type(t, s, depth),
            Some(Value::Array(types)) if !types.is_empty() => {
                let arms: Vec<BoxedStrategy<Value>> = types
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|t| self.of_type(t, s, depth))
                    .collect();
                if arms.is_empty() {
                    self.any()
                } else {
                    proptest::strategy::Union::new(arms).boxed()
                }
            }
            _ if s.get("properties").is_some() => self.of_type("object", s, depth),
            _ => self.any(),
        }
    }

    fn of_type(&self, t: &str, s: &Value, depth: u32) -> BoxedStrategy<Value> {
        match t {
            "null" => Just(Value::Null).boxed(),
            "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
            "integer" | "number" => number(),
            "string" => string_from(self.pool.clone())
                .prop_map(Value::String)
                .boxed(),
            "array" => {
                let item = match s.get("items") {
                    Some(items) => self.node(items, depth + 1),
                    None => self.any(),
                };
                proptest::collection::vec(item, 0..5)
                    .prop_map(Value::Array)
                    .boxed()
            }
            "object" => self.object(s, depth),
            _ => self.any(),
        }
    }

    fn object(&self, s: &Value, depth: u32) -> BoxedStrategy<Value> {
        let required: Vec<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let fields: Vec<BoxedStrategy<Option<(String, Value)>>> = s
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(name, schema)| {
                let present = if required.contains(&name.as_str()) {
                    0.95
                } else {
                    0.5
                };
                let name = name.clone();
                proptest::option::weighted(present, self.node(schema, depth + 1))
                    .prop_map(move |v| v.map(|v| (name.clone(), v)))
                    .boxed()
            })
            .collect();
        let extra_values = match s.get("additionalProperties") {
            Some(schema @ Value::Object(_)) => self.node(schema, depth + 1),
            _ => self.any(),
        };
        // Unknown fields (refused where the params deny them) now and then.
        let extras = proptest::option::weighted(
            0.15,
            proptest::collection::vec((key(), extra_values), 1..3),
        );
        (fields, extras)
            .prop_map(|(fields, extras)| {
                let mut map: Map<String, Value> = fields.into_iter().flatten().collect();
                for (k, v) in extras.into_iter().flatten() {
                    map.insert(k, v);
                }
                Value::Object(map)
            })
            .boxed()
    }
}

/// Arbitrary bytes, mostly short.
pub fn bytes() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(any::<u8>(), 0..4096),
    ]
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shaped_values_follow_the_schema_most_of_the_time() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "name": { "type": "string" },
                "kind": { "$ref": "#/$defs/Kind" },
                "n": { "type": ["integer", "null"] }
            },
            "required": ["name"],
            "$defs": { "Kind": { "enum": ["a", "b"] } }
        });
        let fitting = std::cell::Cell::new(0u32);
        run(
            "self-test",
            200,
            shaped(&schema, vec!["pooled".into()]),
            |v| {
                if v["name"].is_string()
                    && (v["kind"].is_null() || v["kind"] == "a" || v["kind"] == "b")
                {
                    fitting.set(fitting.get() + 1);
                }
                Ok(())
            },
        );
        assert!(fitting.get() > 100, "only {} of 200 fit", fitting.get());
    }
}
