//! The daemon's token: made at start-up, presented by every connection (JSON-RPC and MCP doors
//! alike), compared in constant time.

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
