//! A plugin's manifest (`plugin.toml`): who it is, which WIT world and version it implements,
//! what HTTP it asks for, its config defaults. Parsing and validation only; whether the user
//! granted anything is `grants.rs`.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::PluginError;

/// The WIT versions this host loads, oldest first. A released version is never edited.
pub const SUPPORTED_WIT: &[&str] = &["0.1.0"];

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Recovery,
    Router,
    Executor,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Recovery => "recovery",
            Kind::Router => "router",
            Kind::Executor => "executor",
        }
    }
}

/// The `[http]` section: hosts the plugin may ask for and how the host sends the user's key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpManifest {
    /// Host names the plugin may reach; `*` means any host the user grants.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The header the host sets to the user's key (e.g. `authorization`, `x-api-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_header: Option<String>,
    /// Put before the key in that header (e.g. `Bearer `).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
}

/// `plugin.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub kind: Kind,
    /// The `troupe:plugin` WIT version it was built against.
    pub wit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The component's file name, next to the manifest (default `<name>.wasm` with `_`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpManifest>,
    /// Config defaults (a table), merged under the user's config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// A JSON Schema for the config object (shown by `troupe plugin info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<Value>,
}

impl Manifest {
    /// Reads and validates `dir/plugin.toml`.
    pub fn read(dir: &Path) -> Result<Manifest, PluginError> {
        let path = dir.join("plugin.toml");
        let text = std::fs::read_to_string(&path).map_err(|e| PluginError::Manifest {
            path: path.display().to_string(),
            reason: format!("cannot read it: {e}"),
        })?;
        Manifest::parse(&text).map_err(|reason| PluginError::Manifest {
            path: path.display().to_string(),
            reason,
        })
    }

    /// Parses and validates a manifest's text.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let m: Manifest = toml::from_str(text).map_err(|e| e.to_string().trim().to_string())?;
        m.validate()?;
        Ok(m)
    }

    fn validate(&self) -> Result<(), String> {
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            || self.name.starts_with('-')
        {
            return Err(format!(
                "name {:?} must be 1-64 characters of a-z, 0-9 and '-'",
                self.name
            ));
        }
        if !is_version(&self.version) {
            return Err(format!("version {:?} must look like 1.2.3", self.version));
        }
        if !is_version(&self.wit) {
            return Err(format!("wit {:?} must look like 0.1.0", self.wit));
        }
        let file = self.component_file();
        if file.is_empty()
            || file.contains('/')
            || file.contains('\\')
            || file.starts_with('.')
            || !file.ends_with(".wasm")
        {
            return Err(format!(
                "component {file:?} must be a .wasm file name in the plugin's folder"
            ));
        }
        if let Some(http) = &self.http {
            if self.kind != Kind::Executor && !http.hosts.is_empty() {
                return Err(format!(
                    "a {} plugin cannot ask for HTTP; only executors may",
                    self.kind.as_str()
                ));
            }
            for h in &http.hosts {
                if h != "*" && !valid_host(h) {
                    return Err(format!("http host {h:?} is not a host name"));
                }
            }
            if let Some(header) = &http.key_header
                && http::HeaderName::from_bytes(header.as_bytes()).is_err()
            {
                return Err(format!("key_header {header:?} is not a header name"));
            }
        }
        if let Some(c) = &self.config
            && !c.is_object()
        {
            return Err("config must be a table".into());
        }
        Ok(())
    }

    /// The component's file name.
    pub fn component_file(&self) -> String {
        self.component
            .clone()
            .unwrap_or_else(|| format!("{}.wasm", self.name.replace('-', "_")))
    }

    /// `name@version`, how errors and logs name the plugin.
    pub fn label(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

fn is_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 9 && p.chars().all(|c| c.is_ascii_digit()))
}

pub(crate) fn valid_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == ':')
        && !h.starts_with('.')
        && !h.starts_with('-')
}
