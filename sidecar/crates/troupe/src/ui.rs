//! `troupe ui`: a live dashboard in the terminal (ratatui over crossterm). The parties as trees
//! of roles and members, the inbox answered from the keys, a member's live output and diff, and
//! the timeline; it follows the daemon's subscriptions (`link`), keeps its state as plain data
//! (`app`) and draws it (`view`).

pub mod app;
mod link;
pub mod view;

#[cfg(test)]
mod tests;

use std::time::Duration;

use anyhow::Context as _;
use crossterm::event::{Event as TermEvent, EventStream, KeyCode, KeyEventKind, KeyModifiers};
use futures_util::StreamExt as _;
use serde_json::json;
use troupe_api::layout::Layout;

use app::{App, Key};

/// How often the members' clocks move while nothing else happens.
const CLOCK: Duration = Duration::from_secs(1);

/// Runs the dashboard until the person quits. `all`: every project's parties and inbox, not
/// only this directory's project's.
pub async fn run(layout: &Layout, all: bool) -> anyhow::Result<()> {
    let (scope, label) = if all {
        (json!({}), "every project".to_string())
    } else {
        let cwd = std::env::current_dir().context("reading the current directory")?;
        let (root, _) = troupe_core::project::resolve_project_root(&cwd)
            .with_context(|| format!("finding the project of {}", cwd.display()))?;
        (
            json!({ "cwd": cwd.display().to_string() }),
            root.file_name().map_or_else(
                || root.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
        )
    };
    let (updates_tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let (commands, commands_rx) = tokio::sync::mpsc::unbounded_channel();
    let link = tokio::spawn(link::run(
        layout.clone(),
        link::Scope(scope),
        updates_tx,
        commands_rx,
    ));

    let latency_log = std::env::var_os("TROUPE_UI_LATENCY_LOG");
    let mut terminal = ratatui::try_init().context("this needs a terminal")?;
    let mut app = App::new(label);
    app.track_latency = latency_log.is_some();
    let mut keys = EventStream::new();
    let mut clock = tokio::time::interval(CLOCK);
    let result: anyhow::Result<()> = async {
        loop {
            app.now_ms = now_ms();
            terminal
                .draw(|frame| view::draw(frame, &app))
                .context("drawing the dashboard")?;
            if let Some(path) = &latency_log {
                record_latency(path, std::mem::take(&mut app.just_shown));
            }
            if app.quit {
                return Ok(());
            }
            tokio::select! {
                update = updates.recv() => {
                    let Some(update) = update else { return Ok(()) };
                    app.apply(update);
                    // Everything already waiting goes into one draw.
                    while let Ok(update) = updates.try_recv() {
                        app.apply(update);
                    }
                }
                event = keys.next() => match event {
                    Some(Ok(TermEvent::Key(k))) if k.kind != KeyEventKind::Release => {
                        if let Some(key) = map_key(k.code, k.modifiers) {
                            for command in app.key(key) {
                                let _ = commands.send(command);
                            }
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e).context("reading the terminal"),
                    None => return Ok(()),
                },
                _ = clock.tick() => {}
            }
        }
    }
    .await;
    ratatui::restore();
    link.abort();
    result
}

fn map_key(code: KeyCode, modifiers: KeyModifiers) -> Option<Key> {
    Some(match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Key::CtrlC,
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Tab | KeyCode::BackTab => Key::Tab,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// For the dashboard's benchmark: for each event whose party's new status was just drawn, its
/// seq and the ms from the daemon's recording it to the screen showing it.
fn record_latency(path: &std::ffi::OsStr, shown: Vec<(i64, String)>) {
    use std::io::Write as _;
    if shown.is_empty() {
        return;
    }
    let now = now_ms();
    let mut text = String::new();
    for (seq, at) in shown {
        if let Some(recorded) = parse_ms(&at) {
            text.push_str(&format!("{seq} {}\n", now - recorded));
        }
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(text.as_bytes());
    }
}

/// Milliseconds since the epoch of an RFC 3339 UTC time (`2026-11-25T12:00:00.123Z`).
pub fn parse_ms(at: &str) -> Option<i64> {
    let b = at.as_bytes();
    let num = |r: std::ops::Range<usize>| at.get(r)?.parse::<i64>().ok();
    if b.len() < 19 {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let frac = at.get(19..).unwrap_or("");
    let ms = frac
        .strip_prefix('.')
        .map(|f| {
            let digits: String = f.chars().take_while(char::is_ascii_digit).collect();
            let padded = format!("{digits:0<3}");
            padded
                .get(..3)
                .and_then(|p| p.parse::<i64>().ok())
                .unwrap_or(0)
        })
        .unwrap_or(0);
    // Days since the epoch (the civil-from-days inverse, Howard Hinnant's).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms)
}
