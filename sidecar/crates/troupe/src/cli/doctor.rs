//! `troupe doctor`: what a user needs, checked on this machine, each miss with how to fix it —
//! git, the agent CLIs (Claude Code through claude-agent-acp, codex-acp, Gemini CLI) and their
//! versions, the member sandbox (bubblewrap), the editors' pieces (VS Code's extension, Neovim),
//! NATS when the data dir's config names one, and the daemon. Exit 0 when what Troupe cannot
//! work without is there (git, an agent CLI), else 1.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use troupe_api::layout::Layout;

use super::{QuietExit, print_json, print_line};

/// One check: what, whether it is fine, what was found or how to fix it, and whether Troupe
/// cannot work without it.
struct Check {
    what: &'static str,
    ok: bool,
    note: String,
    needed: bool,
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The first line `program args…` prints within a few seconds, if it ran.
fn version_of(program: &Path, args: &[&str]) -> Option<String> {
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

fn checks(layout: &Layout) -> Vec<Check> {
    let mut out = Vec::new();
    // git: worktrees and the merge queue.
    out.push(match on_path("git") {
        Some(git) => Check {
            what: "git",
            ok: true,
            note: version_of(&git, &["--version"]).unwrap_or_else(|| git.display().to_string()),
            needed: true,
        },
        None => Check {
            what: "git",
            ok: false,
            note: "not found: install git (Debian: apt install git)".into(),
            needed: true,
        },
    });
    // The agent CLIs.
    let mut any = false;
    for v in crate::team::VENDORS {
        let check = match on_path(v.command) {
            Some(path) => {
                any = true;
                let version = version_of(&path, &["--version"])
                    .map(|ver| format!("{ver} ({})", path.display()))
                    .unwrap_or_else(|| path.display().to_string());
                Check {
                    what: v.label,
                    ok: true,
                    note: version,
                    needed: false,
                }
            }
            None => Check {
                what: v.label,
                ok: false,
                note: format!("not found: {}", v.install),
                needed: false,
            },
        };
        out.push(check);
    }
    if !any {
        out.push(Check {
            what: "an agent CLI",
            ok: false,
            note: "none is installed: a team needs at least one (see above), then `troupe init`"
                .into(),
            needed: true,
        });
    }
    // The member box: which layer makes it (bubblewrap, else Landlock); without one members do
    // not start, unless the person turned it off.
    let sandbox = troupe_core::sandbox::Sandbox::detect(layout);
    out.push(Check {
        what: "member box",
        ok: sandbox.is_on(),
        note: format!("layer {}: {}", sandbox.layer().as_str(), sandbox.status()),
        needed: sandbox.layer() == troupe_core::sandbox::LayerKind::Unavailable,
    });
    // The editors' pieces.
    out.push(match on_path("code") {
        Some(code) => {
            let listed = std::process::Command::new(&code)
                .arg("--list-extensions")
                .stderr(std::process::Stdio::null())
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).to_lowercase())
                .unwrap_or_default();
            let has = listed.lines().any(|l| l.ends_with(".troupe") || l == "troupe");
            Check {
                what: "VS Code extension",
                ok: has,
                note: if has {
                    "installed".into()
                } else {
                    "not installed: `cd editors/vscode && npm ci && npx tsc -p . && npx vsce package -o troupe.vsix && code --install-extension troupe.vsix`".into()
                },
                needed: false,
            }
        }
        None => Check {
            what: "VS Code extension",
            ok: true,
            note: "no `code` on PATH (skipped)".into(),
            needed: false,
        },
    });
    out.push(match on_path("nvim") {
        Some(nvim) => {
            let version =
                version_of(&nvim, &["--version"]).unwrap_or_else(|| nvim.display().to_string());
            match nvim_plugin() {
                Some(at) => Check {
                    what: "Neovim plugin",
                    ok: true,
                    note: format!("{version}; installed in {} (:checkhealth troupe)", at.display()),
                    needed: false,
                },
                None => Check {
                    what: "Neovim plugin",
                    ok: false,
                    note: format!(
                        "{version}; not in a package Neovim loads: the release's install.sh puts it there, or add editors/nvim to 'runtimepath'"
                    ),
                    needed: false,
                },
            }
        }
        None => Check {
            what: "Neovim plugin",
            ok: true,
            note: "no `nvim` on PATH (skipped)".into(),
            needed: false,
        },
    });
    // NATS, when configured.
    match crate::remote::nats_url(None, &layout.data_dir) {
        Ok(Some(url)) => {
            let first = url.split(',').next().unwrap_or(&url);
            let hostport = first
                .split_once("://")
                .map_or(first, |(_, rest)| rest)
                .trim_end_matches('/')
                .to_string();
            let reached = std::net::ToSocketAddrs::to_socket_addrs(&hostport)
                .ok()
                .and_then(|mut a| a.next())
                .is_some_and(|addr| {
                    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)).is_ok()
                });
            out.push(Check {
                what: "NATS",
                ok: reached,
                note: if reached {
                    format!("{url} reachable")
                } else {
                    format!("{url} not reachable: start nats-server (with JetStream: -js) or fix `nats` in {}", layout.data_dir.join("config.toml").display())
                },
                needed: false,
            });
        }
        Ok(None) => {}
        Err(e) => out.push(Check {
            what: "NATS",
            ok: false,
            note: format!("{e:#}"),
            needed: false,
        }),
    }
    out
}

pub async fn run(layout: &Layout, json: bool) -> anyhow::Result<()> {
    let layout2 = layout.clone();
    let mut found = tokio::task::spawn_blocking(move || checks(&layout2)).await?;
    // The daemon (not started by this check).
    let daemon = match crate::client::connect(layout, false).await {
        Ok(client) => match client.call("daemon_status", json!({})).await {
            Ok(status) => Check {
                what: "daemon",
                ok: true,
                note: format!(
                    "running (pid {}, version {})",
                    status["pid"],
                    status["version"].as_str().unwrap_or("?")
                ),
                needed: false,
            },
            Err(e) => Check {
                what: "daemon",
                ok: false,
                note: format!("answered with an error: {e}"),
                needed: false,
            },
        },
        Err(_) => Check {
            what: "daemon",
            ok: true,
            note: "not running (any command starts it)".into(),
            needed: false,
        },
    };
    found.push(daemon);
    let broken = found.iter().any(|c| c.needed && !c.ok);
    if json {
        let list: Vec<Value> = found
            .iter()
            .map(|c| json!({ "what": c.what, "ok": c.ok, "note": c.note, "needed": c.needed }))
            .collect();
        print_json(&json!({ "ok": !broken, "checks": list }))?;
    } else {
        for c in &found {
            let mark = match (c.ok, c.needed) {
                (true, _) => "ok  ",
                (false, true) => "MISS",
                (false, false) => "warn",
            };
            print_line(format_args!("{mark}  {:<18} {}", c.what, c.note));
        }
    }
    if broken {
        Err(QuietExit(1).into())
    } else {
        Ok(())
    }
}

/// Where Neovim loads the Troupe plugin from by itself: a package under its data dir's `site`
/// (`pack/*/start/*`, what install.sh writes).
fn nvim_plugin() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    let packs = data.join("nvim/site/pack");
    for pack in std::fs::read_dir(&packs).ok()?.flatten() {
        let Ok(starts) = std::fs::read_dir(pack.path().join("start")) else {
            continue;
        };
        for plugin in starts.flatten() {
            if plugin.path().join("lua/troupe/init.lua").is_file() {
                return Some(plugin.path());
            }
        }
    }
    None
}
