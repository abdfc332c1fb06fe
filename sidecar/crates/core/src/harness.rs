//! An in-process core for unit tests: the daemon's core started on a temporary data dir (real
//! SQLite, the real orchestrator, registry and authority), without doors or sockets. Operations
//! are called by name through the registry, as the person or as an agent, exactly as a door
//! calls them once the caller is authenticated, so an operation's logic gets a test that takes
//! milliseconds. The whole-daemon tests (`tests/it`) remain the ones that try the doors.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use troupe_api::ApiError;
use troupe_api::layout::Layout;

use crate::{Caller, Config, Daemon};

/// A started core and the directory it lives in.
pub struct Core {
    pub daemon: Arc<Daemon>,
    /// A directory for the test's projects, beside the data dir.
    pub dir: tempfile::TempDir,
}

impl Core {
    pub async fn start() -> Core {
        let dir = tempfile::Builder::new()
            .prefix("troupe-core-")
            .tempdir()
            .expect("a temporary directory");
        let layout = Layout {
            data_dir: dir.path().join("data"),
            runtime_dir: dir.path().join("run"),
        };
        layout.prepare_dirs().expect("the data dirs");
        let store = crate::boot::open_store(&layout).expect("the store");
        let ws_addr = "127.0.0.1:0".parse().expect("an address");
        let config = Config {
            layout,
            ws_addr,
            allow_non_loopback: false,
            max_message_bytes: 1 << 20,
        };
        let daemon = crate::boot::start(store, config, ws_addr, Instant::now(), None)
            .await
            .expect("the core starts");
        Core { daemon, dir }
    }

    /// Calls `op` as the person.
    pub async fn call(&self, op: &str, params: Value) -> Result<Value, ApiError> {
        self.call_as(
            Caller::Person {
                door: "test".into(),
            },
            op,
            params,
        )
        .await
    }

    /// Calls `op` as `caller`, admitted by the operation's declared access.
    pub async fn call_as(
        &self,
        caller: Caller,
        op: &str,
        params: Value,
    ) -> Result<Value, ApiError> {
        match crate::registry::handler(op) {
            Some(handler) => handler(self.daemon.clone(), caller, Some(params)).await,
            None => Err(ApiError::NotFound {
                what: "operation".into(),
                id: op.into(),
            }),
        }
    }

    /// An agent CLI the person runs, acting as `session_id` (`troupe mcp`, a hook).
    pub fn agent(session_id: &str) -> Caller {
        Caller::Agent {
            session_id: Some(session_id.into()),
            door: "test".into(),
        }
    }

    /// Registers a session of `cli` in a project directory of this core; its id.
    pub async fn session(&self, cli: &str, project: &str) -> String {
        let cwd = self.dir.path().join(project);
        std::fs::create_dir_all(&cwd).expect("the project dir");
        let r = self
            .call(
                "register_session",
                json!({ "cli": cli, "cwd": cwd.display().to_string() }),
            )
            .await
            .expect("register_session");
        r["session_id"].as_str().expect("a session id").to_string()
    }

    /// Stops the core as `troupe serve` does once its doors are closed.
    pub async fn stop(self) {
        crate::boot::stop(&self.daemon)
            .await
            .expect("the core stops");
    }
}
