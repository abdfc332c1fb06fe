//! The API's typed error and its stable codes (`code_and_kind`: the one place where an error
//! gets its code; the JSON-RPC door only wraps it). Codes are stable: clients branch on them (and
//! on `data.kind`), never on message text. The conversions from the store's and the plugin
//! host's errors are behind the `daemon` feature, which only the daemon's core turns on.

/// Stable JSON-RPC error codes. The standard ones (-32700 parse, -32600 invalid request,
/// -32601 unknown method, -32602 invalid params, -32603 internal) keep their meaning;
/// jsonrpsee itself uses -32007 for an oversized request.
pub mod codes {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL: i32 = -32603;
    pub const OVERSIZED_REQUEST: i32 = -32007;
    pub const UNAUTHORIZED: i32 = -32020;
    pub const NOT_FOUND: i32 = -32021;
    pub const FORBIDDEN: i32 = -32022;
    pub const TOO_LARGE: i32 = -32023;
    pub const CONFLICT: i32 = -32024;
    pub const UNAVAILABLE: i32 = -32025;
    pub const PLUGIN: i32 = -32026;
}

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Params that do not parse, or that parse but make no sense.
    #[error("invalid params for {op}: {reason}")]
    InvalidParams { op: &'static str, reason: String },
    #[error("{what} {id} not found")]
    NotFound { what: String, id: String },
    #[error("{0}")]
    Forbidden(String),
    /// A caller the operation's access does not admit: names the operation, who called and
    /// who may call it.
    #[error("{op} is refused to {caller}: {allowed} may call it{}", why.as_ref().map(|w| format!(" ({w})")).unwrap_or_default())]
    Refused {
        op: &'static str,
        caller: String,
        caller_kind: crate::access::CallerKind,
        allowed: &'static str,
        why: Option<String>,
    },
    #[error("{what} is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
    },
    #[error("{0}")]
    Conflict(String),
    /// The daemon is shutting down or its store is closed.
    #[error("{0}")]
    Unavailable(String),
    /// A plugin could not be loaded, or trapped, timed out or failed (the message names it).
    #[error("{0}")]
    Plugin(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        ApiError::InvalidParams {
            op,
            reason: reason.into(),
        }
    }

    /// Names the operation in an invalid-params error raised below the handler.
    pub fn in_op(self, name: &'static str) -> Self {
        match self {
            ApiError::InvalidParams { op: "", reason } => {
                ApiError::InvalidParams { op: name, reason }
            }
            other => other,
        }
    }

    /// The stable code and `data.kind` of this error.
    pub fn code_and_kind(&self) -> (i32, &'static str) {
        match self {
            ApiError::InvalidParams { .. } => (codes::INVALID_PARAMS, "invalid_params"),
            ApiError::NotFound { .. } => (codes::NOT_FOUND, "not_found"),
            ApiError::Forbidden(_) | ApiError::Refused { .. } => (codes::FORBIDDEN, "forbidden"),
            ApiError::TooLarge { .. } => (codes::TOO_LARGE, "too_large"),
            ApiError::Conflict(_) => (codes::CONFLICT, "conflict"),
            ApiError::Unavailable(_) => (codes::UNAVAILABLE, "unavailable"),
            ApiError::Plugin(_) => (codes::PLUGIN, "plugin"),
            ApiError::Internal(_) => (codes::INTERNAL, "internal"),
        }
    }

    /// The error's `data` member on the wire: its kind, and what was not found.
    pub fn data(&self) -> serde_json::Value {
        let (_, kind) = self.code_and_kind();
        let mut data = serde_json::json!({ "kind": kind });
        if let ApiError::NotFound { what, id } = self {
            data["what"] = what.clone().into();
            data["id"] = id.clone().into();
        }
        if let ApiError::Refused {
            op,
            caller,
            caller_kind,
            allowed,
            ..
        } = self
        {
            data["op"] = (*op).into();
            data["caller"] = caller.clone().into();
            data["caller_kind"] = serde_json::to_value(caller_kind).unwrap_or_default();
            data["allowed"] = (*allowed).into();
        }
        data
    }
}

#[cfg(feature = "daemon")]
impl From<troupe_store::StoreError> for ApiError {
    fn from(e: troupe_store::StoreError) -> Self {
        use troupe_store::StoreError;
        match e {
            StoreError::NotFound { what, id } => ApiError::NotFound {
                what: what.to_string(),
                id,
            },
            StoreError::Forbidden(m) => ApiError::Forbidden(m),
            StoreError::Conflict(m) => ApiError::Conflict(m),
            // The registry fills in the operation's name (see `in_op`).
            StoreError::Invalid(m) => ApiError::InvalidParams { op: "", reason: m },
            StoreError::Closed => ApiError::Unavailable("the daemon is shutting down".into()),
            other => {
                tracing::error!(error = %other, "store failure");
                ApiError::Internal(other.to_string())
            }
        }
    }
}

#[cfg(feature = "daemon")]
impl From<troupe_plugin_host::PluginError> for ApiError {
    fn from(e: troupe_plugin_host::PluginError) -> Self {
        use troupe_plugin_host::PluginError as P;
        match e {
            P::NotFound(name) => ApiError::NotFound {
                what: "plugin".into(),
                id: name,
            },
            P::Host(m) => ApiError::Internal(m),
            other => ApiError::Plugin(other.to_string()),
        }
    }
}
