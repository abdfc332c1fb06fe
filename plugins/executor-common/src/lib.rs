//! What the first-party executor plugins share: the agentic loop (`agent`), a blocking JSON
//! POST over `wasi:http` plus the wall clock (`http`), and their common configuration
//! (`config`). Each executor adds only its provider's wire format and its bindings.

pub mod agent;
pub mod config;
pub mod http;

pub use agent::{
    COMPLETE_TOOL, Env, Finished, Limits, LogLevel, Provider, Reply, ToolCall, ToolSpec,
    complete_outcome, run_loop, tool_result_text, tool_specs, u64_field,
};
pub use config::ExecutorConfig;
pub use http::{excerpt, join_url, now_ms, post_json};

/// The glue every executor repeats, in terms of its own bindings (which differ per crate): the
/// `Host` behind `Env`, and the `Guest` whose `run` parses the config, builds `$provider` (a
/// `Provider` with `new(&ExecutorConfig, &Task)` and a `model` field) and runs the loop.
/// Invoke it at the crate root, next to `mod bindings`.
#[macro_export]
macro_rules! executor_guest {
    ($guest:ident, $provider:ident, $default_base_url:expr) => {
        /// The host, through this crate's bindings.
        struct Host;

        impl $crate::Env for Host {
            fn call_tool(&mut self, name: &str, arguments: &str) -> Result<String, String> {
                bindings::troupe::plugin::tools::call_tool(name, arguments)
            }

            fn report_usage(&mut self, input_tokens: u64, output_tokens: u64, cost_usd: f64) {
                bindings::troupe::plugin::tools::report_usage(
                    bindings::troupe::plugin::tools::Usage {
                        input_tokens,
                        output_tokens,
                        cost_usd,
                    },
                );
            }

            fn log(&mut self, level: $crate::LogLevel, message: &str) {
                use bindings::troupe::plugin::host::Level;
                let level = match level {
                    $crate::LogLevel::Debug => Level::Debug,
                    $crate::LogLevel::Info => Level::Info,
                    $crate::LogLevel::Warn => Level::Warn,
                };
                bindings::troupe::plugin::host::log(level, message);
            }
        }

        struct $guest;

        impl bindings::exports::troupe::plugin::execution::Guest for $guest {
            fn run(
                task: bindings::exports::troupe::plugin::execution::Task,
            ) -> Result<bindings::exports::troupe::plugin::execution::Outcome, String> {
                use bindings::troupe::plugin::host::{self, Level};
                let result = $crate::ExecutorConfig::parse(&host::config(), $default_base_url)
                    .and_then(|config| {
                        let provider = $provider::new(&config, &task)?;
                        host::log(
                            Level::Info,
                            &format!(
                                "running {} at {} (max {} turns)",
                                provider.model, config.base_url, task.max_turns
                            ),
                        );
                        let limits = $crate::Limits {
                            max_turns: task.max_turns,
                            deadline_ms: task.deadline_ms,
                        };
                        $crate::run_loop(&mut Host, &provider, &config, limits)
                    })
                    .map(
                        |done| bindings::exports::troupe::plugin::execution::Outcome {
                            summary: done.summary,
                            artifacts: done.artifacts,
                            turns: done.turns,
                            usage: bindings::troupe::plugin::tools::Usage {
                                input_tokens: done.input_tokens,
                                output_tokens: done.output_tokens,
                                cost_usd: done.cost_usd,
                            },
                        },
                    );
                if let Err(e) = &result {
                    host::log(Level::Warn, &format!("run failed: {e}"));
                }
                result
            }
        }
    };
}
