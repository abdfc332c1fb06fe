//! Fuzz targets (proptest, through `troupe-fuzz`) for what crosses into the host from outside:
//! `plugin.toml` and the grants file (arbitrary and near-valid TOML), a guest's results and
//! import calls at the WIT boundary (arbitrary values of the binding types), and arbitrary
//! grant limits on a real call. `scripts/fuzz` runs each for minutes; `cargo test` a short
//! fixed corpus.

use proptest::prelude::*;
use troupe_fuzz::proptest;

use super::*;
use crate::bindings::v0_1_0 as v0;

/// Any TOML value, nested a little, non-finite floats included.
fn toml_value() -> BoxedStrategy<toml::Value> {
    let leaf = prop_oneof![
        troupe_fuzz::string().prop_map(toml::Value::String),
        any::<i64>().prop_map(toml::Value::Integer),
        any::<f64>().prop_map(toml::Value::Float),
        Just(toml::Value::Float(f64::NAN)),
        any::<bool>().prop_map(toml::Value::Boolean),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(toml::Value::Array),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| toml::Value::Table(m.into_iter().collect())),
        ]
    })
    .boxed()
}

fn s(v: impl Strategy<Value = String> + 'static) -> BoxedStrategy<toml::Value> {
    v.prop_map(toml::Value::String).boxed()
}

/// A value for a key: mostly `good`, else any TOML value.
fn mostly(good: BoxedStrategy<toml::Value>) -> BoxedStrategy<Option<toml::Value>> {
    proptest::option::weighted(0.97, prop_oneof![12 => good, 1 => toml_value()]).boxed()
}

fn host_name() -> BoxedStrategy<String> {
    prop_oneof![
        Just("*".to_string()),
        Just("api.openai.com".to_string()),
        "[a-z0-9.:-]{1,20}",
        troupe_fuzz::string(),
    ]
    .boxed()
}

/// A table from `(key, value)` parts, plus unknown keys now and then.
fn table(
    parts: Vec<(&'static str, BoxedStrategy<Option<toml::Value>>)>,
) -> BoxedStrategy<toml::Table> {
    let names: Vec<&'static str> = parts.iter().map(|(k, _)| *k).collect();
    let values: Vec<BoxedStrategy<Option<toml::Value>>> =
        parts.into_iter().map(|(_, v)| v).collect();
    let extra = proptest::option::weighted(0.1, ("[a-z_]{1,10}", toml_value()));
    (values, extra)
        .prop_map(move |(values, extra)| {
            let mut t = toml::Table::new();
            for (k, v) in names.iter().zip(values) {
                if let Some(v) = v {
                    t.insert((*k).to_string(), v);
                }
            }
            if let Some((k, v)) = extra {
                t.insert(k, v);
            }
            t
        })
        .boxed()
}

/// TOML text from `tables`, sometimes damaged: cut short, a garbage line, a line repeated.
fn damaged(tables: BoxedStrategy<toml::Table>) -> BoxedStrategy<String> {
    let text = tables.prop_map(|t| toml::to_string(&t).unwrap_or_default());
    let damage = prop_oneof![
        12 => Just(None),
        1 => any::<proptest::sample::Index>().prop_map(|i| Some((0u8, i, String::new()))),
        1 => (any::<proptest::sample::Index>(), troupe_fuzz::string())
            .prop_map(|(i, g)| Some((1u8, i, g))),
        1 => any::<proptest::sample::Index>().prop_map(|i| Some((2u8, i, String::new()))),
    ];
    prop_oneof![
        8 => (text, damage).prop_map(|(text, damage)| match damage {
            None => text,
            Some((0, i, _)) => {
                let mut cut = i.index(text.len() + 1);
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text[..cut].to_string()
            }
            Some((1, i, garbage)) => {
                let mut lines: Vec<&str> = text.lines().collect();
                let at = i.index(lines.len() + 1);
                lines.insert(at, &garbage);
                lines.join("\n")
            }
            Some((_, i, _)) => {
                let lines: Vec<&str> = text.lines().collect();
                match lines.get(i.index(lines.len().max(1))) {
                    Some(line) => format!("{text}\n{line}\n"),
                    None => text,
                }
            }
        }),
        1 => any::<String>(),
        1 => "([a-z_\\[\\].]{0,12} ?=? ?[\"'0-9a-z\\[\\]{},.]{0,16}\n){0,6}",
    ]
    .boxed()
}

fn manifest_text() -> BoxedStrategy<String> {
    let http = table(vec![
        (
            "hosts",
            mostly(
                proptest::collection::vec(host_name().prop_map(toml::Value::String), 0..3)
                    .prop_map(toml::Value::Array)
                    .boxed(),
            ),
        ),
        (
            "key_header",
            mostly(s(prop_oneof![
                Just("authorization".to_string()),
                Just("x-api-key".to_string()),
                troupe_fuzz::string()
            ])),
        ),
        ("key_prefix", mostly(s(troupe_fuzz::string()))),
    ])
    .prop_map(toml::Value::Table)
    .boxed();
    damaged(table(vec![
        (
            "name",
            mostly(s(prop_oneof![
                3 => "[a-z][a-z0-9-]{0,10}",
                1 => troupe_fuzz::string()
            ])),
        ),
        (
            "version",
            mostly(s(prop_oneof![
                8 => Just("1.0.0".to_string()),
                1 => "[0-9]{1,11}\\.[0-9]{0,2}\\.[0-9.]{0,3}",
                1 => troupe_fuzz::string()
            ])),
        ),
        (
            "kind",
            mostly(s(prop_oneof![
                8 => proptest::sample::select(vec!["recovery", "router", "executor"])
                    .prop_map(str::to_string),
                1 => troupe_fuzz::string()
            ])),
        ),
        (
            "wit",
            mostly(s(prop_oneof![
                3 => Just("0.1.0".to_string()),
                1 => Just("9.9.9".to_string()),
                1 => troupe_fuzz::string()
            ])),
        ),
        (
            "description",
            proptest::option::weighted(0.3, s(troupe_fuzz::string())).boxed(),
        ),
        (
            "component",
            proptest::option::weighted(
                0.2,
                s(prop_oneof![
                    4 => Just("x.wasm".to_string()),
                    1 => Just("../x.wasm".to_string()),
                    1 => Just(".wasm".to_string()),
                    1 => Just("a/b.wasm".to_string()),
                    1 => troupe_fuzz::string()
                ]),
            )
            .boxed(),
        ),
        ("http", proptest::option::weighted(0.15, http).boxed()),
        (
            "config",
            proptest::option::weighted(
                0.3,
                prop_oneof![
                    4 => proptest::collection::btree_map("[a-z_]{1,8}", toml_value(), 0..4)
                        .prop_map(|m| toml::Value::Table(m.into_iter().collect())),
                    1 => toml_value()
                ],
            )
            .boxed(),
        ),
        (
            "config_schema",
            proptest::option::weighted(0.2, toml_value()).boxed(),
        ),
    ]))
}

#[test]
fn fuzz_plugin_manifest() {
    troupe_fuzz::run("plugin_manifest", 512, manifest_text(), |text| {
        let Ok(m) = Manifest::parse(&text) else {
            return Ok(());
        };
        // What parses is valid: a safe name and a .wasm file in the plugin's folder.
        prop_assert!(
            !m.name.is_empty()
                && m.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        let file = m.component_file();
        prop_assert!(file.ends_with(".wasm") && !file.contains('/') && !file.starts_with('.'));
        // And it survives being written back.
        if let Ok(again) = toml::to_string(&m) {
            let parsed = Manifest::parse(&again);
            prop_assert_eq!(parsed.as_ref(), Ok(&m), "{}", again);
        }
        Ok(())
    });
}

fn grants_text() -> BoxedStrategy<String> {
    let origin = prop_oneof![
        Just("api.openai.com".to_string()),
        Just("https://api.anthropic.com:443".to_string()),
        Just("http://127.0.0.1:8080".to_string()),
        Just("http://example.com".to_string()),
        Just("https://[::1]:99999".to_string()),
        Just("https://user@host".to_string()),
        "(https?://)?[a-z0-9.:\\[\\]@/-]{0,24}",
        troupe_fuzz::string(),
    ];
    let number = || {
        prop_oneof![
            any::<i64>().prop_map(toml::Value::Integer),
            (0i64..5000).prop_map(toml::Value::Integer),
            Just(toml::Value::Integer(i64::MAX)),
        ]
        .boxed()
    };
    let grant = table(vec![
        (
            "allow_http",
            mostly(
                proptest::collection::vec(origin.prop_map(toml::Value::String), 0..3)
                    .prop_map(toml::Value::Array)
                    .boxed(),
            ),
        ),
        (
            "allow_private",
            mostly(any::<bool>().prop_map(toml::Value::Boolean).boxed()),
        ),
        ("key_env", mostly(s(troupe_fuzz::string()))),
        (
            "config",
            proptest::option::weighted(0.3, toml_value()).boxed(),
        ),
        ("memory_mib", mostly(number())),
        ("call_timeout_ms", mostly(number())),
        ("max_requests", mostly(number())),
        ("max_response_bytes", mostly(number())),
    ]);
    let plugins = proptest::collection::btree_map(
        prop_oneof!["[a-z][a-z0-9-]{0,8}", troupe_fuzz::string()],
        grant.prop_map(toml::Value::Table),
        0..3,
    )
    .prop_map(|m| toml::Value::Table(m.into_iter().collect()))
    .boxed();
    damaged(table(vec![("plugins", mostly(plugins))]))
}

#[test]
fn fuzz_plugin_grants() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plugins.toml");
    troupe_fuzz::run("plugin_grants", 256, grants_text(), |text| {
        std::fs::write(&path, &text).unwrap();
        let Ok(g) = Grants::read(&path) else {
            return Ok(());
        };
        for grant in g.plugins.values() {
            for o in &grant.allow_http {
                prop_assert!(grants::Origin::parse(o).is_ok(), "{o:?}");
            }
        }
        // What was read is written back and read again unchanged.
        if g.write(&path).is_ok() {
            let again = Grants::read(&path);
            prop_assert_eq!(again.as_ref().ok(), Some(&g));
        }
        Ok(())
    });
}

#[test]
fn fuzz_origin() {
    troupe_fuzz::run("plugin_origin", 1024, troupe_fuzz::string(), |text| {
        if let Ok(o) = grants::Origin::parse(&text) {
            prop_assert!(manifest::valid_host(&o.host));
            prop_assert!(o.https || is_local_host(&o.host));
        }
        Ok(())
    });
}

use crate::grants::is_local_host;

/// Arbitrary results of the three exported functions, as the bindings type them.
#[derive(Debug)]
enum GuestResult {
    Decision(v0::recovery::exports::troupe::plugin::recovery_strategy::Decision),
    Route(
        Result<v0::router::exports::troupe::plugin::routing::Choice, String>,
        Vec<Candidate>,
    ),
    Outcome(
        Result<v0::executor::exports::troupe::plugin::execution::Outcome, String>,
        Usage,
        u64,
        Vec<String>,
    ),
}

fn artifacts_text() -> BoxedStrategy<String> {
    prop_oneof![
        troupe_fuzz::json().prop_map(|v| v.to_string()),
        Just(String::new()),
        Just("  \n".to_string()),
        (1usize..400).prop_map(|n| "[".repeat(n)),
        (1usize..200).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
        Just("1e999".to_string()),
        troupe_fuzz::string(),
    ]
    .boxed()
}

fn guest_result() -> BoxedStrategy<GuestResult> {
    use v0::executor::exports::troupe::plugin::execution as exec;
    use v0::recovery::exports::troupe::plugin::recovery_strategy as rec;
    use v0::router::exports::troupe::plugin::routing as route;
    let decision = prop_oneof![
        any::<u64>().prop_map(rec::Decision::Restart),
        prop_oneof![
            Just(rec::NotifyTarget::Leader),
            Just(rec::NotifyTarget::User),
            Just(rec::NotifyTarget::Party)
        ]
        .prop_map(rec::Decision::Pause),
        Just(rec::Decision::Abort),
    ]
    .prop_map(GuestResult::Decision);
    let candidates = proptest::collection::vec(
        troupe_fuzz::string().prop_map(|name| Candidate {
            name,
            ..Candidate::default()
        }),
        0..4,
    );
    let route = (
        candidates,
        any::<proptest::sample::Index>(),
        any::<bool>(),
        troupe_fuzz::string(),
        troupe_fuzz::string(),
    )
        .prop_map(|(candidates, pick, ok, agent, reason)| {
            let agent = if ok && !candidates.is_empty() {
                candidates[pick.index(candidates.len())].name.clone()
            } else {
                agent
            };
            let out = if ok || !reason.is_empty() {
                Ok(route::Choice { agent, reason })
            } else {
                Err(agent)
            };
            GuestResult::Route(out, candidates)
        });
    let usage = (any::<u64>(), any::<u64>(), any::<f64>()).prop_map(|(i, o, c)| Usage {
        input_tokens: i,
        output_tokens: o,
        cost_usd: c,
    });
    let outcome = (
        any::<bool>(),
        troupe_fuzz::string(),
        artifacts_text(),
        any::<u32>(),
        (any::<u64>(), any::<u64>(), any::<f64>()),
        usage,
        any::<u64>(),
        proptest::collection::vec(troupe_fuzz::string(), 0..3),
    )
        .prop_map(
            |(ok, summary, artifacts, turns, (i, o, c), host_usage, calls, denied)| {
                let out = if ok {
                    Ok(exec::Outcome {
                        summary,
                        artifacts,
                        turns,
                        usage: exec::Usage {
                            input_tokens: i,
                            output_tokens: o,
                            cost_usd: c,
                        },
                    })
                } else {
                    Err(summary)
                };
                GuestResult::Outcome(out, host_usage, calls, denied)
            },
        );
    prop_oneof![decision, route, outcome].boxed()
}

#[test]
fn fuzz_wit_results() {
    troupe_fuzz::run("plugin_wit_results", 1024, guest_result(), |r| {
        let label = "fuzz@1.0.0".to_string();
        match r {
            GuestResult::Decision(d) => {
                let restart = match &d {
                    v0::recovery::exports::troupe::plugin::recovery_strategy::Decision::Restart(
                        ms,
                    ) => Some(*ms),
                    _ => None,
                };
                let ours = decision_from_wit(d);
                if let Some(ms) = restart {
                    prop_assert_eq!(ours, RecoveryDecision::Restart { delay_ms: ms });
                }
            }
            GuestResult::Route(out, candidates) => {
                match route_from_wit(out, &candidates, label.clone()) {
                    Ok(choice) => prop_assert!(candidates.iter().any(|c| c.name == choice.agent)),
                    Err(e) => prop_assert!(e.to_string().contains(&label), "{e}"),
                }
            }
            GuestResult::Outcome(out, usage, calls, denied) => {
                match outcome_from_wit(out, label.clone(), usage, calls, &denied) {
                    // The host's counts, never the guest's claim.
                    Ok(o) => {
                        prop_assert_eq!(o.usage, usage);
                        prop_assert_eq!(o.tool_calls, calls);
                    }
                    Err(e) => prop_assert!(e.to_string().contains(&label), "{e}"),
                }
            }
        }
        Ok(())
    });
}

/// One import call a guest may make, with arbitrary arguments.
#[derive(Debug, Clone)]
enum ImportCall {
    Log(u8, String),
    Context(String),
    Config,
    CallTool(String, String),
    ReportUsage(u64, u64, f64),
}

fn import_calls() -> BoxedStrategy<Vec<ImportCall>> {
    let call = prop_oneof![
        (0u8..5, troupe_fuzz::string()).prop_map(|(l, m)| ImportCall::Log(l, m)),
        troupe_fuzz::string().prop_map(ImportCall::Context),
        Just(ImportCall::Config),
        (troupe_fuzz::string(), troupe_fuzz::string())
            .prop_map(|(n, a)| ImportCall::CallTool(n, a)),
        (
            any::<u64>(),
            any::<u64>(),
            prop_oneof![
                any::<f64>(),
                Just(f64::NAN),
                Just(f64::INFINITY),
                Just(-1.0),
                Just(f64::MAX)
            ]
        )
            .prop_map(|(i, o, c)| ImportCall::ReportUsage(i, o, c)),
    ];
    proptest::collection::vec(call, 1..40).boxed()
}

/// Answers every tool call with its arguments.
struct Echo;

impl ToolHandler for Echo {
    fn call(
        &self,
        name: String,
        arguments: String,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'static>> {
        Box::pin(async move { Ok(format!("{name}:{}", arguments.len())) })
    }
}

#[test]
fn fuzz_wit_imports() {
    use crate::bindings::v0_1_0::executor::troupe::plugin::{host as h, tools as t};
    let tmp = tempfile::tempdir().unwrap();
    let host = host();
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("first", "router"),
        &first_router(),
    ))
    .unwrap();
    let plugin = host.get("first").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    troupe_fuzz::run("plugin_wit_imports", 128, import_calls(), |calls| {
        let (mut store, _limits) =
            host.store(&plugin, &CallContext::default(), Some(Arc::new(Echo)));
        let state = store.data_mut();
        for call in calls {
            match call {
                ImportCall::Log(level, message) => {
                    let level = [
                        h::Level::Trace,
                        h::Level::Debug,
                        h::Level::Info,
                        h::Level::Warn,
                        h::Level::Error,
                    ][usize::from(level) % 5];
                    h::Host::log(state, level, message);
                }
                ImportCall::Context(key) => {
                    let _ = h::Host::context(state, key);
                }
                ImportCall::Config => {
                    let config = h::Host::config(state);
                    prop_assert!(serde_json::from_str::<Value>(&config).is_ok());
                }
                ImportCall::CallTool(name, args) => {
                    let answer = rt.block_on(t::Host::call_tool(state, name, args));
                    prop_assert!(answer.is_ok() || state.tool_calls > 1000);
                }
                ImportCall::ReportUsage(i, o, c) => {
                    t::Host::report_usage(
                        state,
                        t::Usage {
                            input_tokens: i,
                            output_tokens: o,
                            cost_usd: c,
                        },
                    );
                    // The host's tally stays a usable number whatever the guest claims.
                    prop_assert!(state.usage.cost_usd.is_finite() && state.usage.cost_usd >= 0.0);
                }
            }
        }
        Ok(())
    });
}

fn grant() -> BoxedStrategy<PluginGrant> {
    let limit = || {
        prop_oneof![
            Just(None),
            Just(Some(0)),
            Just(Some(u64::MAX)),
            Just(Some(u64::MAX / 1000)),
            any::<u64>().prop_map(Some),
            (1u64..2000).prop_map(Some)
        ]
    };
    (
        prop_oneof![
            Just(None),
            Just(Some(0u32)),
            Just(Some(u32::MAX)),
            any::<u32>().prop_map(Some)
        ],
        limit(),
        limit(),
        limit(),
        proptest::option::of(troupe_fuzz::json()),
        proptest::collection::vec(troupe_fuzz::string(), 0..2),
        proptest::option::of(troupe_fuzz::string()),
    )
        .prop_map(
            |(
                memory_mib,
                call_timeout_ms,
                max_requests,
                max_response_bytes,
                config,
                allow_http,
                key_env,
            )| {
                PluginGrant {
                    allow_http,
                    allow_private: false,
                    key_env,
                    config,
                    memory_mib,
                    call_timeout_ms,
                    max_requests,
                    max_response_bytes,
                }
            },
        )
        .boxed()
}

#[test]
fn fuzz_grant_limits_on_a_real_call() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host();
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("first", "router"),
        &first_router(),
    ))
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    troupe_fuzz::run("plugin_grant_limits", 128, grant(), |grant| {
        host.set_grants(Grants {
            plugins: [("first".to_string(), grant)].into_iter().collect(),
        });
        let answer = rt.block_on(host.route(
            "first",
            "review this".into(),
            Vec::new(),
            candidates(),
            &CallContext::default(),
        ));
        match answer {
            Ok(choice) => prop_assert_eq!(choice.agent, "reviewer"),
            // A limit too small for the call is a named error, not a crash.
            Err(e) => prop_assert!(e.to_string().contains("first@1.0.0"), "{e}"),
        }
        Ok(())
    });
}

/// Found by `fuzz_wit_imports`: two reports of `f64::MAX` dollars made the run's cost infinite
/// (which JSON cannot carry).
#[test]
fn regression_reported_cost_stays_finite() {
    let mut usage = Usage::default();
    let huge = Usage {
        cost_usd: f64::MAX,
        ..Usage::default()
    };
    usage.add(&huge);
    usage.add(&huge);
    assert!(usage.cost_usd.is_finite(), "{usage:?}");
}
