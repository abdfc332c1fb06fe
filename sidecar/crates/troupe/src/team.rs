//! A project's first team: which agent CLIs are installed (Claude Code through
//! claude-agent-acp, Codex through codex-acp, Gemini CLI), which API keys are set, and the
//! project's own test command (cargo, npm, pytest, go, make); from them a real default party —
//! a planning leader, developers on different vendors, a reviewer and a merger that lands with
//! that test command — written to `.troupe/config.toml` with why each was chosen. Used by
//! `troupe init` and by the ACP door's first prompt in a project without a config.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// An agent CLI Troupe drives over ACP: its runner's name, the command it starts, how to
/// install it, the API keys it can use.
pub struct Vendor {
    pub name: &'static str,
    pub label: &'static str,
    pub command: &'static str,
    pub install: &'static str,
    pub keys: &'static [&'static str],
}

/// In order of preference for the leader and the reviewer.
pub const VENDORS: &[Vendor] = &[
    Vendor {
        name: "claude",
        label: "Claude Code",
        command: "claude-agent-acp",
        install: "npm install -g @agentclientprotocol/claude-agent-acp",
        keys: &["ANTHROPIC_API_KEY"],
    },
    Vendor {
        name: "codex",
        label: "Codex",
        command: "codex-acp",
        install: "npm install -g @zed-industries/codex-acp",
        keys: &["OPENAI_API_KEY", "CODEX_API_KEY"],
    },
    Vendor {
        name: "gemini",
        label: "Gemini CLI",
        command: "gemini",
        install: "npm install -g @google/gemini-cli",
        keys: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
    },
];

/// What was found on this machine and in the project.
pub struct Found {
    /// The installed vendors, with where their command is.
    pub installed: Vec<(&'static Vendor, PathBuf)>,
    /// The API keys set (names only).
    pub keys: Vec<&'static str>,
    /// The project's test command and why.
    pub test: Option<(String, String)>,
}

/// Looks on `path` (a `PATH` value) for the agent CLIs, in the environment for their keys, and
/// in `root` for its test command.
pub fn detect(root: &Path, path: Option<OsString>, env: impl Fn(&str) -> Option<String>) -> Found {
    let dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let installed = VENDORS
        .iter()
        .filter_map(|v| find(&dirs, v.command).map(|p| (v, p)))
        .collect();
    let keys = VENDORS
        .iter()
        .flat_map(|v| v.keys.iter().copied())
        .filter(|k| env(k).is_some_and(|v| !v.trim().is_empty()))
        .collect();
    Found {
        installed,
        keys,
        test: test_command(root),
    }
}

/// An executable file named `name` in one of `dirs`.
fn find(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    dirs.iter().map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The project's own test command, and what says so.
pub fn test_command(root: &Path) -> Option<(String, String)> {
    let has = |f: &str| root.join(f).is_file();
    let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap_or_default();
    if has("Cargo.toml") {
        return Some(("cargo test".into(), "Cargo.toml".into()));
    }
    if has("package.json") {
        let package: serde_json::Value =
            serde_json::from_str(&read("package.json")).unwrap_or_default();
        if package["scripts"]["test"].is_string() {
            return Some(("npm test".into(), "package.json's scripts.test".into()));
        }
    }
    if has("go.mod") {
        return Some(("go test ./...".into(), "go.mod".into()));
    }
    let pytest = has("pytest.ini")
        || has("conftest.py")
        || read("pyproject.toml").contains("[tool.pytest")
        || read("setup.cfg").contains("[tool:pytest]")
        || (has("pyproject.toml") || has("setup.py")) && root.join("tests").is_dir();
    if pytest {
        return Some(("python3 -m pytest".into(), "the pytest setup".into()));
    }
    let makefile = read("Makefile");
    if makefile.lines().any(|l| l.starts_with("test:")) {
        return Some(("make test".into(), "the Makefile's test target".into()));
    }
    None
}

/// One role of the team: its name, its vendor and what it does.
pub struct Seat {
    pub role: String,
    pub vendor: &'static Vendor,
    pub why: String,
}

/// The default party from what was found: `None` without an agent CLI.
pub fn plan(found: &Found) -> Option<Vec<Seat>> {
    let vendors: Vec<&'static Vendor> = found.installed.iter().map(|(v, _)| *v).collect();
    let lead = *vendors.first()?;
    let mut seats = vec![Seat {
        role: "lead".into(),
        vendor: lead,
        why: "plans the work into steps, commits the plan, steers".into(),
    }];
    // Developers on different vendors: the others first, then the leader's.
    let mut devs: Vec<&'static Vendor> = vendors.iter().skip(1).copied().collect();
    devs.push(lead);
    devs.truncate(2);
    if vendors.len() == 1 {
        devs.truncate(1);
    }
    for v in &devs {
        seats.push(Seat {
            role: if devs.len() == 1 {
                "dev".into()
            } else {
                format!("dev-{}", v.name)
            },
            vendor: v,
            why: "builds the steps it owns in its own worktree".into(),
        });
    }
    // The reviewer: a vendor that develops nothing, else the leader's.
    let reviewer = vendors
        .iter()
        .copied()
        .find(|v| !devs.iter().any(|d| d.name == v.name))
        .unwrap_or(lead);
    seats.push(Seat {
        role: "reviewer".into(),
        vendor: reviewer,
        why: "reviews the plan and each submitted step against its acceptance".into(),
    });
    Some(seats)
}

/// The name of the party `troupe init` writes.
pub const PARTY: &str = "team";

/// `.troupe/config.toml` for `seats`, commented with why.
pub fn render(found: &Found, seats: &[Seat]) -> String {
    let mut out = String::from(
        "# Troupe's team for this project, written by `troupe init`: edit it freely.\n\
         # A prompt from your editor (`troupe acp`) or `troupe party launch team` runs it.\n\n",
    );
    let _ = writeln!(out, "[default]\nparty = \"{PARTY}\"\n");
    let mut vendors: Vec<&Vendor> = seats.iter().map(|s| s.vendor).collect();
    vendors.sort_by_key(|v| v.name);
    vendors.dedup_by_key(|v| v.name);
    for v in vendors {
        let _ = writeln!(
            out,
            "# {} over ACP ({}).\n[agents.{}]\nrunner = \"acp:{}\"\nisolation = \"worktree\"\n",
            v.label, v.command, v.name, v.name
        );
    }
    let (test, why) = match &found.test {
        Some((cmd, why)) => (Some(cmd.as_str()), format!("found from {why}")),
        None => (
            None,
            "none found: set test_command to gate landing".to_string(),
        ),
    };
    let _ = writeln!(
        out,
        "# The merge queue: lands the members' branches on the branch you have out once they \
         are done, only if the tests pass (test command {why}).\n[agents.merge]\nrunner = \
         \"land\"\n[agents.merge.land]"
    );
    match test {
        Some(cmd) => {
            let _ = writeln!(out, "test_command = {}\n", toml_string(cmd));
        }
        None => out.push_str("# test_command = \"make test\"\n\n"),
    }
    let _ = writeln!(out, "[parties.{PARTY}]");
    let _ = writeln!(
        out,
        "description = \"A leader plans, developers build, a reviewer checks, the merge queue lands.\""
    );
    for s in seats {
        let leader = if s.role == "lead" {
            ", is_leader = true"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "roles.{} = {{ agent = \"{}\"{leader} }}  # {}",
            s.role, s.vendor.name, s.why
        );
    }
    let _ = writeln!(out, "roles.merge = {{ agent = \"merge\" }}");
    let others: Vec<String> = seats.iter().map(|s| format!("\"{}\"", s.role)).collect();
    let _ = writeln!(out, "flow.merge = [{}]", others.join(", "));
    out
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// What `troupe init` (or the ACP door) did, in lines for a person.
pub struct Outcome {
    pub lines: Vec<String>,
    /// The config was written (a team exists now).
    pub written: bool,
}

/// Finds a team for the project at `root` and writes its `.troupe/config.toml`, unless it has
/// one (then nothing changes) or no agent CLI is installed (then it says what to install).
pub fn init(root: &Path, found: &Found) -> anyhow::Result<Outcome> {
    let path = root.join(troupe_core::project_config::PATH);
    let mut lines = Vec::new();
    if path.exists() {
        lines.push(format!(
            "{} exists: nothing changed (delete it to choose a team again).",
            path.display()
        ));
        return Ok(Outcome {
            lines,
            written: false,
        });
    }
    for v in VENDORS {
        match found.installed.iter().find(|(i, _)| i.name == v.name) {
            Some((_, at)) => lines.push(format!("found {} ({})", v.label, at.display())),
            None => lines.push(format!("no {} (install: {})", v.label, v.install)),
        }
    }
    if found.keys.is_empty() {
        lines.push(
            "no API key set (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY): the agent CLIs \
             use their own logins"
                .into(),
        );
    } else {
        lines.push(format!("API keys set: {}", found.keys.join(", ")));
    }
    let Some(seats) = plan(found) else {
        lines.push(
            "Nothing was written: no agent CLI is installed. Install one of the above (and log \
             in or set its API key), then run `troupe init` again."
                .into(),
        );
        return Ok(Outcome {
            lines,
            written: false,
        });
    };
    match &found.test {
        Some((cmd, why)) => lines.push(format!("test command: {cmd} (from {why})")),
        None => lines.push(
            "no test command found: the merge queue lands without one (set test_command)".into(),
        ),
    }
    let text = render(found, &seats);
    // The definitions must be valid as written (a test of our own output, not the person's).
    let parsed: toml::Table = toml::from_str(&text)?;
    drop(parsed);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, &text)?;
    lines.push(format!("wrote {}: party {PARTY}", path.display()));
    for s in &seats {
        lines.push(format!("  {} — {}: {}", s.role, s.vendor.label, s.why));
    }
    lines.push(format!(
        "  merge — the merge queue: lands on your branch{}",
        found
            .test
            .as_ref()
            .map(|(c, _)| format!(" if `{c}` passes"))
            .unwrap_or_default()
    ));
    Ok(Outcome {
        lines,
        written: true,
    })
}

#[cfg(test)]
mod tests;
