//! Who a connection is: the daemon's token (the person's credential, made at start-up), compared
//! in constant time, or a run's own credential (checked by the core); the headers a front
//! process names its door with. Shared by the doors (JSON-RPC, MCP) and the worker's endpoint.

/// Whether `presented` is the daemon's token (constant time).
pub fn token_matches(presented: &str, token: &str) -> bool {
    constant_time_eq(presented.as_bytes(), token.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 256 random bits, hex-encoded.
pub fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("cannot get random bytes: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The header a front process names its door with (`cli`, `lsp`, `acp`, `mcp`, `hook`): the
/// door the person's decisions are recorded as taken at.
pub const DOOR_HEADER: &str = "x-troupe-door";
/// The header with which a holder of the person's token says it calls for an agent CLI the
/// person runs (`troupe mcp`, hooks): such a caller gets an agent's rights, not the person's.
pub const AGENT_HEADER: &str = "x-troupe-agent";
/// The session an agent CLI acts as (`TROUPE_SESSION_ID` of the CLI Troupe did not start).
pub const SESSION_HEADER: &str = "x-troupe-session";

/// Who a connection is, from its headers: the person's token (the person, or an agent CLI of
/// theirs when it says so), a run's own credential (that member, while its run lasts), or
/// nobody (refused with the reason).
#[derive(Clone)]
pub enum Gate {
    /// The daemon's doors.
    Daemon {
        token: std::sync::Arc<str>,
        daemon: std::sync::Weak<troupe_core::Daemon>,
    },
    /// A plain token and no caller (a remote worker's per-run endpoint, which forwards to the
    /// hub as the run).
    Token(std::sync::Arc<str>),
}

impl Gate {
    /// The caller a request's headers make, or why it is refused.
    pub fn admit(&self, headers: &http::HeaderMap) -> Result<Option<troupe_core::Caller>, String> {
        let presented = bearer(headers)?;
        match self {
            Gate::Token(token) => token_matches(presented, token)
                .then_some(None)
                .ok_or_else(|| "wrong token".to_string()),
            Gate::Daemon { token, daemon } => {
                if token_matches(presented, token) {
                    return Ok(Some(person_or_agent(headers, "rpc")));
                }
                let daemon = daemon
                    .upgrade()
                    .ok_or_else(|| "the daemon is shutting down".to_string())?;
                troupe_core::authority::identify_member(&daemon.store, &daemon.run_key, presented)
                    .map(Some)
            }
        }
    }
}

/// The holder of the person's token: the person through the door it names, or an agent CLI
/// when it says it calls for one.
pub fn person_or_agent(headers: &http::HeaderMap, default_door: &str) -> troupe_core::Caller {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let door = header(DOOR_HEADER)
        .filter(|d| d.len() <= 32 && d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .unwrap_or_else(|| default_door.to_string());
    if header(AGENT_HEADER).is_some() {
        troupe_core::Caller::Agent {
            session_id: header(SESSION_HEADER),
            door,
        }
    } else {
        troupe_core::Caller::Person { door }
    }
}

/// The token of `Authorization: Bearer <token>`.
pub fn bearer(headers: &http::HeaderMap) -> Result<&str, String> {
    let Some(header) = headers.get(http::header::AUTHORIZATION) else {
        return Err("missing token (send `Authorization: Bearer <token>`)".into());
    };
    header
        .to_str()
        .ok()
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| "malformed Authorization header (expected `Bearer <token>`)".into())
}
