//! Plugins: installing, listing, granting, routing.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An installed plugin.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    /// recovery, router or executor.
    pub kind: String,
    /// The troupe:plugin WIT version it targets.
    pub wit: String,
    #[serde(default)]
    pub description: Option<String>,
    pub dir: String,
    pub sha256: String,
    /// Hosts its manifest asks for (`*`: any the user grants).
    pub http_hosts: Vec<String>,
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    #[serde(default)]
    pub config_schema: Option<serde_json::Value>,
    /// What the user granted it (plugins/grants.toml).
    pub grant: serde_json::Value,
    /// compiled or cache: where its machine code came from at its last load.
    pub loaded_from: String,
    pub load_ms: f64,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct BrokenPlugin {
    pub dir: String,
    pub error: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PluginsResult {
    pub plugins: Vec<PluginInfo>,
    /// Plugin folders that did not load, with why.
    pub broken: Vec<BrokenPlugin>,
    /// WIT versions this daemon loads.
    pub supported_wit: Vec<String>,
    pub plugins_dir: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallPluginParams {
    /// A folder holding `plugin.toml` and the component it names (absolute, or relative to `cwd`).
    pub path: String,
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PluginResult {
    pub plugin: PluginInfo,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RemovePluginResult {
    pub name: String,
    pub removed: bool,
}

/// Changes to what a plugin is granted; absent fields stay as they are.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantPluginParams {
    pub name: String,
    /// Origins it may reach (replaces the list): `api.openai.com`, `https://host:port`, or
    /// `http://127.0.0.1:8080` (plain http only for local hosts).
    #[serde(default)]
    pub allow_http: Option<Vec<String>>,
    #[serde(default)]
    pub allow_private: Option<bool>,
    /// The daemon's environment variable holding the provider key ("" to clear).
    #[serde(default)]
    pub key_env: Option<String>,
    /// Config values over the manifest's defaults (replaces the object).
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    #[serde(default)]
    pub memory_mib: Option<u32>,
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
    #[serde(default)]
    pub max_requests: Option<u64>,
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
}

/// An agent a router may choose.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteCandidate {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteRequestParams {
    /// The router plugin.
    pub router: String,
    /// The request to route.
    pub request: String,
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
    /// The agents to choose from (default: every agent definition).
    #[serde(default)]
    pub candidates: Option<Vec<RouteCandidate>>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RouteResult {
    pub agent: String,
    pub reason: String,
    pub router: String,
}
