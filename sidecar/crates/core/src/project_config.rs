//! A project's own Troupe config, `.troupe/config.toml` at its root: the default a prompt starts
//! (`[default] party = "…"` or `agent = "…"`), the project's own agent and party definitions
//! (`[agents.<name>]`, `[parties.<name>]`: the same fields as `create_agent_definition` and
//! `create_party_definition`, the name taken from the table's), and `[sandbox]`. A definition
//! here is used for a party launched in this project before one of the same name in the
//! daemon's store, so a team checked into the repository is the team that runs. Beside it,
//! `person_section`: a section of the person's own `<data dir>/config.toml`.

use std::path::{Path, PathBuf};

use serde_json::Value;
use troupe_engine::{AgentDefinition, PartyDefinition};

/// Section `name` of the person's `<data dir>/config.toml` (None: no file, or no such
/// section); an unreadable file is named.
pub fn person_section(data_dir: &Path, name: &str) -> Result<Option<toml::Value>, String> {
    let path = data_dir.join("config.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(table.remove(name))
}

/// The largest config read.
const MAX_CONFIG: u64 = 256 * 1024;

/// Where a project keeps its config, from its root.
pub const PATH: &str = ".troupe/config.toml";

/// A project's parsed `.troupe/config.toml`.
#[derive(Debug, Clone)]
pub struct ProjectConfig {
    path: PathBuf,
    table: toml::Table,
}

impl ProjectConfig {
    /// The config at `root`, `None` without one; an unreadable or invalid one is an error
    /// naming the file.
    pub fn load(root: &Path) -> Result<Option<ProjectConfig>, String> {
        let path = root.join(PATH);
        let Some(bytes) = crate::project::read_project_file(&path, MAX_CONFIG)? else {
            return Ok(None);
        };
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
        let table = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Some(ProjectConfig { path, table }))
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `[section] key`, when it is a string.
    /// A whole section (`[forge]`), as written.
    pub fn section(&self, name: &str) -> Option<&toml::Value> {
        self.table.get(name)
    }

    pub fn string(&self, section: &str, key: &str) -> Option<&str> {
        self.table.get(section)?.get(key)?.as_str()
    }

    /// `[sandbox] approve_own_checkout_edits`: a boxed member's edits inside its own checkout
    /// go through without asking (true unless set false).
    pub fn approve_own_checkout_edits(&self) -> bool {
        self.sandbox_flag("approve_own_checkout_edits")
    }

    /// `[sandbox] approve_in_box_commands`: a boxed member's commands whose words stay in its
    /// checkout go through without asking (true unless set false).
    pub fn approve_in_box_commands(&self) -> bool {
        self.sandbox_flag("approve_in_box_commands")
    }

    fn sandbox_flag(&self, key: &str) -> bool {
        self.table
            .get("sandbox")
            .and_then(|s| s.get(key))
            .and_then(toml::Value::as_bool)
            .unwrap_or(true)
    }

    /// `[sandbox]`'s additions to its members' boxes (paths to write or hide, hosts to reach);
    /// an unreadable one adds nothing.
    pub fn sandbox(&self) -> crate::sandbox::plan::ProjectBox {
        match self.table.get("sandbox") {
            Some(section) => section.clone().try_into().unwrap_or_else(|e| {
                tracing::warn!(file = %self.path.display(), error = %e, "[sandbox] is unreadable: it adds nothing to the box");
                crate::sandbox::plan::ProjectBox::default()
            }),
            None => crate::sandbox::plan::ProjectBox::default(),
        }
    }

    /// `[parties.<name>]`, checked as a definition (its agents are checked at launch).
    pub fn party(&self, name: &str) -> Result<Option<PartyDefinition>, String> {
        self.definition("parties", name)
    }

    /// `[agents.<name>]`, checked as a definition.
    pub fn agent(&self, name: &str) -> Result<Option<AgentDefinition>, String> {
        let Some(agent) = self.definition::<AgentDefinition>("agents", name)? else {
            return Ok(None);
        };
        agent
            .validate()
            .map_err(|e| format!("{} [agents.{name}]: {e}", self.path.display()))?;
        Ok(Some(agent))
    }

    fn definition<T: serde::de::DeserializeOwned>(
        &self,
        section: &str,
        name: &str,
    ) -> Result<Option<T>, String> {
        let Some(entry) = self.table.get(section).and_then(|s| s.get(name)) else {
            return Ok(None);
        };
        let mut json = serde_json::to_value(entry)
            .map_err(|e| format!("{} [{section}.{name}]: {e}", self.path.display()))?;
        match &mut json {
            Value::Object(fields) => {
                fields.insert("name".into(), Value::String(name.to_string()));
            }
            _ => {
                return Err(format!(
                    "{} [{section}.{name}] must be a table",
                    self.path.display()
                ));
            }
        }
        serde_json::from_value(json)
            .map(Some)
            .map_err(|e| format!("{} [{section}.{name}]: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests;
