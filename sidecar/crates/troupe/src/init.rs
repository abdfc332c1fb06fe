//! `troupe init claude|codex|gemini`: writes the agent CLI's project config so it gets Troupe's
//! MCP tools (and, for Claude Code, Troupe's hooks), merging into what is there and printing
//! each change. It never removes or rewrites a setting it did not add; running it again changes
//! nothing.

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// Claude Code hook events Troupe handles, and whether they take a tool matcher.
const CLAUDE_HOOKS: &[(&str, bool)] = &[
    ("SessionStart", false),
    ("UserPromptSubmit", false),
    ("PreToolUse", true),
    ("PostToolUse", true),
    ("Stop", false),
    ("SubagentStop", false),
    ("Notification", false),
    ("SessionEnd", false),
];

/// Writes the config for `cli` into the project around `cwd`; returns the lines to print.
pub fn init(cli: &str, cwd: &Path, troupe: &Path) -> anyhow::Result<Vec<String>> {
    let (root, _) = troupe_core::project::resolve_project_root(cwd)
        .with_context(|| format!("finding the project of {}", cwd.display()))?;
    let exe = command_name(troupe, std::env::var_os("PATH"));
    let mcp = json!({ "command": exe, "args": ["mcp"] });
    let mut report = Vec::new();
    match cli {
        "claude" => {
            let path = root.join(".mcp.json");
            let mut doc = read_json(&path)?;
            if set_if_absent(&mut doc, &["mcpServers", "troupe"], mcp, &path)? {
                report.push(format!(
                    "{}: mcpServers.troupe = {{\"command\": {exe:?}, \"args\": [\"mcp\"]}}",
                    rel(&root, &path)
                ));
                write_json(&path, &doc)?;
            }
            let path = root.join(".claude/settings.json");
            let mut doc = read_json(&path)?;
            let mut changed = false;
            for (event, matcher) in CLAUDE_HOOKS {
                let command = format!("{exe} hook {event}");
                let list = ensure_array(&mut doc, &["hooks", event], &path)?;
                // Ours by either name (`troupe …` or an absolute path to it).
                let tail = format!("troupe hook {event}");
                let present = list.iter().any(|group| {
                    group["hooks"].as_array().is_some_and(|hs| {
                        hs.iter().any(|h| {
                            h["command"].as_str().is_some_and(|c| {
                                c == command || c.ends_with(&format!("/{tail}")) || c == tail
                            })
                        })
                    })
                });
                if !present {
                    let mut group = json!({ "hooks": [{ "type": "command", "command": command }] });
                    if *matcher {
                        group["matcher"] = json!("*");
                    }
                    if *event == "PreToolUse" {
                        // A Troupe run's call may wait for a person's decision.
                        group["hooks"][0]["timeout"] = json!(600);
                    }
                    list.push(group);
                    changed = true;
                    report.push(format!("{}: hooks.{event} += {command}", rel(&root, &path)));
                }
            }
            if changed {
                write_json(&path, &doc)?;
            }
        }
        "gemini" => {
            let path = root.join(".gemini/settings.json");
            let mut doc = read_json(&path)?;
            if set_if_absent(&mut doc, &["mcpServers", "troupe"], mcp, &path)? {
                report.push(format!(
                    "{}: mcpServers.troupe = {{\"command\": {exe:?}, \"args\": [\"mcp\"]}}",
                    rel(&root, &path)
                ));
                write_json(&path, &doc)?;
            }
        }
        "codex" => {
            let path = root.join(".codex/config.toml");
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut doc: toml::Table = toml::from_str(&text)
                .with_context(|| format!("{} is not valid TOML", path.display()))?;
            let servers = doc
                .entry("mcp_servers")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let Some(servers) = servers.as_table_mut() else {
                bail!("{}: mcp_servers is not a table", path.display());
            };
            if !servers.contains_key("troupe") {
                let mut entry = toml::Table::new();
                entry.insert("command".into(), toml::Value::String(exe.clone()));
                entry.insert(
                    "args".into(),
                    toml::Value::Array(vec![toml::Value::String("mcp".into())]),
                );
                servers.insert("troupe".into(), toml::Value::Table(entry));
                report.push(format!(
                    "{}: [mcp_servers.troupe] command = {exe:?}, args = [\"mcp\"]",
                    rel(&root, &path)
                ));
                write_file(&path, &toml::to_string(&doc)?)?;
            }
        }
        other => bail!("unknown agent CLI {other:?}: use claude, codex or gemini"),
    }
    if report.is_empty() {
        report.push(format!("{cli}: already set up in {}", root.display()));
    }
    Ok(report)
}

/// How the project's files name this binary: `troupe` when the `troupe` first on `path` is this
/// very file (files a team can commit and share), else its absolute path.
fn command_name(troupe: &Path, path: Option<std::ffi::OsString>) -> String {
    let first = path.and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("troupe"))
            .find(|c| c.is_file())
    });
    let same = match (troupe.canonicalize(), first.map(|f| f.canonicalize())) {
        (Ok(me), Some(Ok(found))) => me == found,
        _ => false,
    };
    if same {
        "troupe".into()
    } else {
        troupe.display().to_string()
    }
}

fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON; fix it first", path.display())),
        _ => Ok(json!({})),
    }
}

fn write_json(path: &Path, doc: &Value) -> anyhow::Result<()> {
    write_file(path, &format!("{}\n", serde_json::to_string_pretty(doc)?))
}

fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The object at `doc[keys…]`, created when missing; an error when something else is there.
fn object_at<'a>(
    doc: &'a mut Value,
    keys: &[&str],
    path: &Path,
) -> anyhow::Result<&'a mut serde_json::Map<String, Value>> {
    let mut at = doc;
    for k in keys {
        let Value::Object(map) = at else {
            bail!(
                "{}: {} is not an object; fix it first",
                path.display(),
                keys.join(".")
            );
        };
        at = map.entry(k.to_string()).or_insert_with(|| json!({}));
    }
    match at {
        Value::Object(map) => Ok(map),
        _ => bail!(
            "{}: {} is not an object; fix it first",
            path.display(),
            keys.join(".")
        ),
    }
}

/// Sets `doc[keys…]` to `value` unless something is there already; whether it did.
fn set_if_absent(
    doc: &mut Value,
    keys: &[&str],
    value: Value,
    path: &Path,
) -> anyhow::Result<bool> {
    let Some((last, parents)) = keys.split_last() else {
        return Ok(false);
    };
    let map = object_at(doc, parents, path)?;
    if map.contains_key(*last) {
        return Ok(false);
    }
    map.insert(last.to_string(), value);
    Ok(true)
}

/// The array at `doc[keys…]`, created when missing; an error when something else is there.
fn ensure_array<'a>(
    doc: &'a mut Value,
    keys: &[&str],
    path: &Path,
) -> anyhow::Result<&'a mut Vec<Value>> {
    let Some((last, parents)) = keys.split_last() else {
        bail!("no key");
    };
    let map = object_at(doc, parents, path)?;
    match map.entry(last.to_string()).or_insert_with(|| json!([])) {
        Value::Array(a) => Ok(a),
        _ => bail!(
            "{}: {} is not a list; fix it first",
            path.display(),
            keys.join(".")
        ),
    }
}

#[cfg(test)]
mod tests;
