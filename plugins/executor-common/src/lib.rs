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
