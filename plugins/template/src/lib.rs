//! `template`: the smallest useful Troupe plugin, a router. Copy this crate to start your own.
//!
//! It picks the first candidate agent whose name appears in the request text (ignoring case),
//! and otherwise the first candidate.
//!
//! To make it yours:
//! 1. copy this folder, rename the crate in `Cargo.toml` and `name`/`component` in
//!    `plugin.toml` (the component is the crate name with `-` turned into `_`, plus `.wasm`);
//! 2. pick your world below (`recovery`, `router` or `executor`) and set `kind` to match;
//! 3. implement the `Guest` trait of the interface that world exports;
//! 4. `cargo build --release --target wasm32-wasip2`, then copy
//!    `target/wasm32-wasip2/release/<crate>.wasm` next to `plugin.toml` and run
//!    `troupe plugin install <that folder>`.

// `generate!` reads the WIT contract and writes Rust types and functions for one world:
// - what the world *imports* (here `host`) becomes plain functions you call, e.g.
//   `bindings::troupe::plugin::host::log(..)`;
// - what it *exports* (here `routing`) becomes a `Guest` trait you implement;
// - `export!` then wires your type up as the component's exports.
// The path is relative to this crate's Cargo.toml; point it at your copy of the WIT folder.
// Bindings are FFI, so they use `unsafe` internally; the workspace denies `unsafe` everywhere
// else, hence the `allow` on this module only.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "router" });
    use super::Template;
    export!(Template);
}

use bindings::exports::troupe::plugin::routing::{Candidate, Choice, Guest, Request};
use bindings::troupe::plugin::host::{self, Level};

/// The type the component's exports are implemented on. It holds no state: a router gets a
/// fresh instance for every call, so anything stored would be lost anyway.
struct Template;

impl Guest for Template {
    /// Called once per routing request with the agents that may take it.
    fn route(request: Request, candidates: Vec<Candidate>) -> Result<Choice, String> {
        // An `Err` tells the host this plugin could not decide; say why in plain words.
        let Some(first) = candidates.first() else {
            return Err("no candidates".to_string());
        };

        // `host::config()` is the JSON object from the manifest's [config], merged with the
        // user's settings. This plugin has no settings; a real one would parse it with
        // serde_json and fall back to defaults for missing keys.
        let _config = host::config();

        let text = request.text.to_lowercase();
        let chosen = candidates
            .iter()
            .find(|c| !c.name.is_empty() && text.contains(&c.name.to_lowercase()));

        let choice = match chosen {
            Some(c) => Choice {
                agent: c.name.clone(),
                reason: format!("the request names {}", c.name),
            },
            None => Choice {
                agent: first.name.clone(),
                reason: "no candidate is named in the request; taking the first".to_string(),
            },
        };

        // Log lines go to the daemon's log, tagged with this plugin's name and version.
        host::log(
            Level::Debug,
            &format!("template routed to {}", choice.agent),
        );
        Ok(choice)
    }
}
