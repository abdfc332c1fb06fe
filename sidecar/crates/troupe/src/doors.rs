//! The doors: each serves the operation registry (`troupe_api` declares it, `troupe_core::registry`
//! binds it) in one wire format. `rpc` is JSON-RPC over the Unix socket and the loopback
//! WebSocket, `mcp` is MCP (stdio through the client, and streamable HTTP in the daemon), `lsp` is
//! the editors' language server (through the client), `acp` is the Agent Client Protocol for ACP
//! editors (through the client). A door never imports another door: what two
//! of them share lives outside `doors` (`crate::auth`, `crate::client`).

pub mod acp;
pub mod lsp;
pub mod mcp;
pub mod rpc;
pub mod webhook;
