//! The operation registry's handlers: every operation `troupe_api` declares, bound to its handler
//! in `crate::ops`. Built from the same list (`troupe_api::for_each_operation!`), so a declared
//! operation without a handler does not compile. The doors look handlers up here by name.
//! Each handler (`handler(name)`: a caller and raw params in) admits the call, parses its
//! params and contains a panic (`guarded`: an internal error, -32603), so no door repeats them.

use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::Value;
use troupe_api::types::*;
use troupe_api::{ApiError, parse_params};

pub use crate::authority::Caller;
use crate::authority::admit;
use crate::daemon::Daemon;

/// An operation's entry point: who calls and the raw params in, JSON result out. The call is
/// admitted by the operation's declared access (`crate::authority::admit`) before its params
/// are parsed; a refused call has done nothing.
pub type Handler =
    fn(Arc<Daemon>, Caller, Option<Value>) -> BoxFuture<'static, Result<Value, ApiError>>;

/// Runs a handler future, turning a panic into an internal error so no input can take the
/// daemon (or the connection) down.
pub async fn guarded<R: serde::Serialize>(
    op: &'static str,
    fut: impl std::future::Future<Output = Result<R, ApiError>>,
) -> Result<Value, ApiError> {
    let result = std::panic::AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(op, panic = %what, "operation handler panicked");
            Err(ApiError::Internal(format!(
                "{op} failed unexpectedly: {what}"
            )))
        })
        .map_err(|e| e.in_op(op))?;
    serde_json::to_value(result).map_err(|e| ApiError::Internal(e.to_string()))
}

macro_rules! bind {
    ($( $(#[doc = $doc:literal])+ $name:ident($params:ty) -> $result:ty, $access:expr; )+) => {
        /// The handler of an operation, by name (`None`: no such operation).
        pub fn handler(name: &str) -> Option<Handler> {
            match name {
                $(stringify!($name) => Some(|daemon, caller, params| {
                    async move {
                        let access = {
                            #[allow(unused_imports)]
                            use troupe_api::Access::*;
                            $access
                        };
                        let params = admit(&daemon.store, &caller, stringify!($name), access, params)?;
                        let params: $params = parse_params(stringify!($name), params)?;
                        guarded(stringify!($name), crate::ops::$name(&daemon, params)).await
                    }
                    .boxed()
                }),)+
                _ => None,
            }
        }
    };
}

troupe_api::for_each_operation!(bind);

#[cfg(test)]
mod tests {
    #[test]
    fn every_declared_operation_has_a_handler() {
        for op in troupe_api::OPERATIONS {
            assert!(
                super::handler(op.name).is_some(),
                "{} has no handler",
                op.name
            );
        }
        assert!(super::handler("no_such_operation").is_none());
    }
}
