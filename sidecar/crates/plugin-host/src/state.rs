//! The data of one plugin store: an empty WASI context (no preopens, no environment, no
//! sockets, no stdio), the HTTP gate, memory limits, the call's context and config, and for
//! executors the run's tool handler and usage. Implements the `host` and `tools` imports.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::Usage;
use crate::bindings::v0_1_0::executor::troupe::plugin::{host, tools};
use crate::http_gate::HttpGate;

/// Answers an executor's tool calls: the daemon checks the workflow's policy, asks for
/// approval and runs the tool there.
pub trait ToolHandler: Send + Sync {
    /// Runs tool `name` with JSON `arguments`; `Err` is a refusal or failure the model reads.
    fn call(
        &self,
        name: String,
        arguments: String,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'static>>;

    /// The run's usage grew by `delta`.
    fn usage(&self, delta: Usage) {
        let _unused = delta;
    }
}

/// Most a single log line from a plugin may hold.
const MAX_LOG: usize = 4096;

pub(crate) struct HostState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) http: WasiHttpCtx,
    pub(crate) gate: HttpGate,
    pub(crate) limits: StoreLimits,
    pub(crate) label: String,
    pub(crate) context: BTreeMap<String, String>,
    pub(crate) config: String,
    pub(crate) tools: Option<Arc<dyn ToolHandler>>,
    pub(crate) usage: Usage,
    pub(crate) tool_calls: u64,
    pub(crate) logs_left: u32,
}

/// Tool calls one run may make.
const MAX_TOOL_CALLS: u64 = 1000;

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

impl host::Host for HostState {
    fn log(&mut self, level: host::Level, message: String) {
        match self.logs_left {
            0 => return,
            1 => {
                self.logs_left = 0;
                tracing::warn!(plugin = %self.label, "log budget spent; further lines dropped");
                return;
            }
            _ => self.logs_left -= 1,
        }
        let mut message = message;
        if message.len() > MAX_LOG {
            let mut cut = MAX_LOG;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let plugin = self.label.as_str();
        match level {
            host::Level::Trace => tracing::trace!(plugin, "{message}"),
            host::Level::Debug => tracing::debug!(plugin, "{message}"),
            host::Level::Info => tracing::info!(plugin, "{message}"),
            host::Level::Warn => tracing::warn!(plugin, "{message}"),
            host::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }

    fn context(&mut self, key: String) -> Option<String> {
        self.context.get(&key).cloned()
    }

    fn config(&mut self) -> String {
        self.config.clone()
    }
}

impl tools::Host for HostState {
    async fn call_tool(&mut self, name: String, arguments: String) -> Result<String, String> {
        self.tool_calls += 1;
        if self.tool_calls > MAX_TOOL_CALLS {
            return Err(format!(
                "the run's budget of {MAX_TOOL_CALLS} tool calls is spent"
            ));
        }
        match &self.tools {
            Some(handler) => handler.call(name, arguments).await,
            None => Err(format!("tool {name} is not available here")),
        }
    }

    fn report_usage(&mut self, usage: tools::Usage) {
        let delta = Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cost_usd: if usage.cost_usd.is_finite() && usage.cost_usd >= 0.0 {
                usage.cost_usd
            } else {
                0.0
            },
        };
        self.usage.add(&delta);
        if let Some(handler) = &self.tools {
            handler.usage(delta);
        }
    }
}
