//! Draws the dashboard: a header line, the parties (as trees of roles and members) beside the
//! inbox (and the schedules under it, when there are some), a lower pane (timeline, an inbox item, a member's output or diff), a key line, and a
//! dialog over them when picking or typing an answer. Fits 80×24 and grows with the terminal.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, List, ListItem, ListState, Paragraph, Wrap};
use troupe_api::types::{MemberStatusView, PullRequestView, RoleStatus, ScheduleView};

use super::app::{App, Focus, Mode, Pane, Row};

pub fn draw(frame: &mut Frame<'_>, app: &App) {
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(4),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let [top, bottom] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(body);
    let [parties, inbox] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(top);
    draw_header(frame, app, header);
    draw_parties(frame, app, parties);
    if app.schedules.is_empty() {
        draw_inbox(frame, app, inbox);
    } else {
        // The schedules under the inbox: a line each, up to four shown at once.
        let shown = u16::try_from(app.schedules.len().min(4)).unwrap_or(4);
        let [inbox, schedules] =
            Layout::vertical([Constraint::Min(3), Constraint::Length(shown + 2)]).areas(inbox);
        draw_inbox(frame, app, inbox);
        draw_schedules(frame, app, schedules);
    }
    draw_pane(frame, app, bottom);
    draw_footer(frame, app, footer);
    match &app.mode {
        Mode::Normal => {}
        Mode::Help => draw_help(frame),
        Mode::Pick { item_id, selected } => draw_pick(frame, app, item_id, *selected),
        Mode::Input { item_id, text } => draw_input(frame, app, item_id, text),
    }
}

fn draw_header(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let (dot, color) = if app.connected {
        ("●", Color::Green)
    } else {
        ("○", Color::Red)
    };
    let line = Line::from(vec![
        Span::styled(" Troupe ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("· {} · ", app.scope)),
        Span::styled(format!("{dot} {}", app.connection), Style::new().fg(color)),
        Span::raw(format!(" · inbox {} · ? help", app.inbox.len())),
    ]);
    frame.render_widget(Paragraph::new(line), area);
}

fn block(title: String, focused: bool) -> Block<'static> {
    let style = if focused {
        Style::new().fg(Color::Cyan)
    } else {
        Style::new()
    };
    Block::bordered().title(title).border_style(style)
}

/// A status as a mark and a colour.
fn mark(status: &str) -> (&'static str, Color) {
    match status {
        "completed" | "success" | "landed" => ("✓", Color::Green),
        "running" | "executing" => ("●", Color::Yellow),
        "failed" | "crashed" | "error" => ("✗", Color::Red),
        "cancelled" => ("–", Color::DarkGray),
        "paused" | "held" => ("‖", Color::Magenta),
        _ => ("·", Color::Gray),
    }
}

/// `m:ss`, or `h:mm:ss` past an hour.
pub fn clock(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

fn role_line(role: &RoleStatus) -> Line<'static> {
    let (m, color) = mark(role.status.as_str());
    let leader = if role.is_leader { " (leader)" } else { "" };
    Line::from(vec![
        Span::raw("  "),
        Span::styled(m, Style::new().fg(color)),
        Span::raw(format!(
            " {}{leader} [{}] {} {}/{}",
            role.role, role.agent, role.status, role.completed, role.count
        )),
        Span::styled(
            if role.crashes > 0 {
                format!(" crashes {}", role.crashes)
            } else {
                String::new()
            },
            Style::new().fg(Color::Red),
        ),
    ])
}

fn member_line(member: &MemberStatusView, now_ms: i64) -> Line<'static> {
    let (m, color) = mark(member.status.as_str());
    let elapsed = member
        .started_at_ms
        .map(|start| clock(member.finished_at_ms.unwrap_or(now_ms) - start))
        .unwrap_or_default();
    let attempts = if member.attempts > 1 {
        format!(" try {}", member.attempts)
    } else {
        String::new()
    };
    Line::from(vec![
        Span::raw("     "),
        Span::styled(m, Style::new().fg(color)),
        Span::raw(format!(
            " #{} {:<9} {elapsed}{attempts}",
            member.index, member.status
        )),
    ])
}

/// A party's pull request: `PR #12 open · CI round 1/3`, `PR #12 ready to merge`, ….
pub fn pull_line(pull: &PullRequestView) -> Line<'static> {
    let pr = pull
        .number
        .map_or_else(|| "PR".to_string(), |n| format!("PR #{n}"));
    let rounds = if pull.ci_rounds > 0 {
        format!(" · CI round {}/{}", pull.ci_rounds, pull.max_ci_rounds)
    } else {
        String::new()
    };
    let (text, color) = match pull.state.as_str() {
        "working" if pull.number.is_none() => (
            format!(
                "PR not opened yet{}",
                pull.issue
                    .as_deref()
                    .map(|i| format!(" · issue {i}"))
                    .unwrap_or_default()
            ),
            Color::Gray,
        ),
        "open" | "fixing" | "working" => (format!("{pr} {}{rounds}", pull.state), Color::Yellow),
        "ready" => (format!("{pr} ready to merge"), Color::Green),
        "merged" => (format!("{pr} merged"), Color::Green),
        "gave_up" => (
            match &pull.detail {
                Some(why) => format!("{pr} gave up{rounds}: {why}"),
                None => format!("{pr} gave up{rounds}"),
            },
            Color::Red,
        ),
        other => (format!("{pr} {other}"), Color::DarkGray),
    };
    Line::from(vec![
        Span::raw("  "),
        Span::styled(format!("↳ {text}"), Style::new().fg(color)),
    ])
}

fn draw_parties(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let rows = app.rows();
    let items: Vec<ListItem<'_>> = rows
        .iter()
        .map(|row| match row {
            Row::Party { party } => {
                let p = &app.parties[*party];
                let (m, color) = mark(p.summary.status.as_str());
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| serde_json::to_value(s.collab_state).ok())
                    .and_then(|v| v.as_str().map(str::to_string))
                    .map(|s| format!(" · {s}"))
                    .unwrap_or_default();
                let head = Line::from(vec![
                    Span::styled(m, Style::new().fg(color)),
                    Span::styled(
                        format!(" {}", p.summary.name),
                        Style::new().add_modifier(Modifier::BOLD),
                    ),
                    Span::raw(format!(
                        " {}{phase} {}",
                        p.summary.status,
                        crate::client::short(&p.summary.party_id)
                    )),
                ]);
                // Its pull request under it, as part of the same row.
                match &p.pull {
                    Some(pull) => ListItem::new(vec![head, pull_line(pull)]),
                    None => ListItem::new(head),
                }
            }
            Row::Role { party, role } => {
                let status = app.parties[*party].status.as_ref();
                match status.and_then(|s| s.roles.get(*role)) {
                    Some(r) => ListItem::new(role_line(r)),
                    None => ListItem::new(""),
                }
            }
            Row::Member { party, member } => {
                let status = app.parties[*party].status.as_ref();
                match status.and_then(|s| s.members.get(*member)) {
                    Some(m) => ListItem::new(member_line(m, app.now_ms)),
                    None => ListItem::new(""),
                }
            }
        })
        .collect();
    let focused = app.focus == Focus::Parties && app.mode == Mode::Normal;
    let title = format!(" Parties ({}) ", app.parties.len());
    let empty = items.is_empty();
    let list = List::new(items)
        .block(block(title, focused))
        .highlight_symbol("›")
        .highlight_style(if focused {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new().add_modifier(Modifier::UNDERLINED)
        });
    if empty {
        let hint = Paragraph::new("no party yet: `troupe party launch NAME` starts one")
            .wrap(Wrap { trim: true })
            .block(block(" Parties (0) ".into(), focused));
        frame.render_widget(hint, area);
        return;
    }
    let mut state = ListState::default().with_selected(Some(app.party_row));
    frame.render_stateful_widget(list, area, &mut state);
}

fn draw_inbox(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let focused = app.focus == Focus::Inbox && app.mode == Mode::Normal;
    let title = format!(" Inbox ({}) ", app.inbox.len());
    if app.inbox.is_empty() {
        let p = Paragraph::new("nothing is waiting for you").block(block(title, focused));
        frame.render_widget(p, area);
        return;
    }
    let items: Vec<ListItem<'_>> = app
        .inbox
        .iter()
        .map(|item| {
            ListItem::new(Line::from(vec![
                Span::styled(
                    format!("{:<9}", item.kind),
                    Style::new().fg(kind_color(&item.kind)),
                ),
                Span::raw(format!(" {}", item.title)),
            ]))
        })
        .collect();
    let list = List::new(items)
        .block(block(title, focused))
        .highlight_symbol("›")
        .highlight_style(if focused {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        });
    let mut state = ListState::default().with_selected(Some(app.inbox_row));
    frame.render_stateful_widget(list, area, &mut state);
}

/// `MM-DDTHH:MMZ` of a UTC time (`2026-11-29T02:00:00.000Z`).
fn short_time(at: &str) -> String {
    match (at.get(5..16), at.len() >= 16) {
        (Some(t), true) => format!("{t}Z"),
        _ => at.to_string(),
    }
}

fn schedule_line(s: &ScheduleView) -> Line<'static> {
    let (m, color, state) = if let Some(e) = &s.error {
        ("✗", Color::Red, format!("not running: {e}"))
    } else if s.paused {
        ("‖", Color::Magenta, "paused".to_string())
    } else {
        let next = s
            .next_due_at
            .as_deref()
            .map_or_else(|| "never".to_string(), short_time);
        ("●", Color::Green, format!("next {next}"))
    };
    let failed = if s.last_error.is_some() {
        " · last launch failed"
    } else {
        ""
    };
    Line::from(vec![
        Span::styled(m, Style::new().fg(color)),
        Span::styled(
            format!(" {}", s.name),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" {state} · {}", s.party)),
        Span::styled(failed, Style::new().fg(Color::Red)),
    ])
}

fn draw_schedules(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let focused = app.focus == Focus::Schedules && app.mode == Mode::Normal;
    let title = format!(" Schedules ({}) ", app.schedules.len());
    let items: Vec<ListItem<'_>> = app
        .schedules
        .iter()
        .map(|s| ListItem::new(schedule_line(s)))
        .collect();
    let list = List::new(items)
        .block(block(title, focused))
        .highlight_symbol("›")
        .highlight_style(if focused {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        });
    let mut state = ListState::default().with_selected(Some(app.schedule_row));
    frame.render_stateful_widget(list, area, &mut state);
}

fn kind_color(kind: &str) -> Color {
    match kind {
        "approval" => Color::Yellow,
        "question" | "pick" => Color::Cyan,
        "decision" => Color::Magenta,
        "escalation" | "merge_conflict" => Color::Red,
        _ => Color::Gray,
    }
}

/// The last `height` lines of `lines`, `back` lines up from the end.
fn tail<T>(lines: Vec<T>, height: u16, back: u16) -> Vec<T> {
    let height = usize::from(height);
    let end = lines
        .len()
        .saturating_sub(usize::from(back))
        .max(height.min(lines.len()));
    let start = end.saturating_sub(height);
    lines.into_iter().skip(start).take(end - start).collect()
}

fn draw_pane(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let inner_height = area.height.saturating_sub(2);
    let (title, lines, from_top): (String, Vec<Line<'static>>, bool) = match app.pane {
        Pane::Timeline => (
            " Timeline ".into(),
            app.timeline.iter().map(event_line).collect(),
            false,
        ),
        Pane::Item => item_pane(app),
        Pane::Output => match &app.log {
            Some(log) => {
                let who = app
                    .selected_member()
                    .filter(|(_, run)| run.as_deref() == Some(log.run_id.as_str()))
                    .map(|(m, _)| format!("{}#{} ", m.role, m.index))
                    .unwrap_or_default();
                let ended = if log.ended { " (ended)" } else { "" };
                (
                    format!(
                        " Output: {who}run {}{ended} ",
                        crate::client::short(&log.run_id)
                    ),
                    log.text
                        .lines()
                        .map(|l| Line::from(l.to_string()))
                        .collect(),
                    false,
                )
            }
            None => (" Output ".into(), Vec::new(), false),
        },
        Pane::Diff => diff_pane(app),
    };
    let lines = if from_top {
        lines
            .into_iter()
            .skip(usize::from(app.scroll))
            .take(usize::from(inner_height))
            .collect()
    } else {
        tail(lines, inner_height, app.scroll)
    };
    let p = Paragraph::new(lines).block(block(title, false));
    frame.render_widget(p, area);
}

fn event_line(e: &troupe_api::types::Event) -> Line<'static> {
    let time = e.at.get(11..19).unwrap_or(&e.at).to_string();
    let who = match (e.data["role"].as_str(), e.data["index"].as_i64()) {
        (Some(role), Some(i)) => format!(" {role}#{i}"),
        (Some(role), None) => format!(" {role}"),
        _ => String::new(),
    };
    let party = e
        .party_id
        .as_deref()
        .map(|p| format!(" {}", crate::client::short(p)))
        .unwrap_or_default();
    Line::from(vec![
        Span::styled(time, Style::new().fg(Color::DarkGray)),
        Span::raw(format!(" {}", e.kind)),
        Span::styled(who, Style::new().fg(Color::Cyan)),
        Span::styled(party, Style::new().fg(Color::DarkGray)),
    ])
}

fn item_pane(app: &App) -> (String, Vec<Line<'static>>, bool) {
    let Some(item) = app.selected_item() else {
        return (
            " Item ".into(),
            vec![Line::from("nothing is waiting for you")],
            true,
        );
    };
    let mut lines = vec![
        Line::from(Span::styled(
            item.title.clone(),
            Style::new().add_modifier(Modifier::BOLD),
        )),
        Line::from(format!(
            "{} · waiting since {}{}",
            item.kind,
            item.since.get(11..19).unwrap_or(&item.since),
            item.party_id
                .as_deref()
                .map(|p| format!(" · party {}", crate::client::short(p)))
                .unwrap_or_default()
        )),
    ];
    if let Some(detail) = &item.detail {
        lines.extend(detail.lines().map(|l| Line::from(l.to_string())));
    }
    let choices: Vec<String> = item
        .answer
        .choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let c = c.as_str().map_or_else(|| c.to_string(), str::to_string);
            format!("{} {c}", i + 1)
        })
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        if choices.is_empty() {
            "Enter: type your answer".to_string()
        } else {
            format!("answers: {}  (a/d, a number, or Enter)", choices.join("  "))
        },
        Style::new().fg(Color::Cyan),
    )));
    (format!(" {} ", item.kind), lines, true)
}

fn diff_pane(app: &App) -> (String, Vec<Line<'static>>, bool) {
    let Some((member, diff)) = &app.diff else {
        return (" Diff ".into(), vec![Line::from("reading the diff…")], true);
    };
    let title = format!(" Diff: {}#{} ", member.role, member.index);
    let diff = match diff {
        Ok(d) => d,
        Err(e) => return (title, vec![Line::from(format!("no diff: {e}"))], true),
    };
    let mut lines = vec![Line::from(format!(
        "{} file(s), +{} −{} on {}",
        diff.files.len(),
        diff.additions,
        diff.deletions,
        diff.worktree.branch
    ))];
    for f in &diff.files {
        lines.push(Line::from(Span::styled(
            format!(
                "{} {} (+{} −{})",
                f.status, f.path, f.additions, f.deletions
            ),
            Style::new().add_modifier(Modifier::BOLD),
        )));
        for l in f.patch.lines() {
            let color = if l.starts_with('+') {
                Color::Green
            } else if l.starts_with('-') {
                Color::Red
            } else if l.starts_with("@@") {
                Color::Cyan
            } else {
                Color::Reset
            };
            lines.push(Line::from(Span::styled(
                l.to_string(),
                Style::new().fg(color),
            )));
        }
    }
    (title, lines, true)
}

fn draw_footer(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let keys = match app.focus {
        Focus::Parties => "Tab inbox · ↑↓ · o output · v diff · t timeline · q quit",
        Focus::Inbox if !app.schedules.is_empty() => {
            "Tab schedules · ↑↓ · a approve · d deny · Enter answer · q quit"
        }
        Focus::Inbox => "Tab parties · ↑↓ · a approve · d deny · Enter answer · q quit",
        Focus::Schedules => "Tab parties · ↑↓ · p pause/resume · r run now · q quit",
    };
    let line = match &app.notice {
        Some(n) => Line::from(vec![
            Span::styled(n.clone(), Style::new().fg(Color::Yellow)),
            Span::styled(format!(" · {keys}"), Style::new().fg(Color::DarkGray)),
        ]),
        None => Line::from(Span::styled(keys, Style::new().fg(Color::DarkGray))),
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// A box of `w`×`h` in the middle of the screen (as much as fits).
fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

fn draw_pick(frame: &mut Frame<'_>, app: &App, item_id: &str, selected: usize) {
    let Some(item) = app.inbox.iter().find(|i| i.item_id == item_id) else {
        return;
    };
    let items: Vec<ListItem<'_>> = item
        .answer
        .choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let c = c.as_str().map_or_else(|| c.to_string(), str::to_string);
            ListItem::new(format!("{} {c}", i + 1))
        })
        .collect();
    let height = u16::try_from(items.len())
        .unwrap_or(u16::MAX)
        .saturating_add(2);
    let area = centered(frame.area(), 60, height);
    frame.render_widget(Clear, area);
    let list = List::new(items)
        .block(block(format!(" {} — Enter answers, Esc ", item.kind), true))
        .highlight_symbol("›")
        .highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = ListState::default().with_selected(Some(selected));
    frame.render_stateful_widget(list, area, &mut state);
}

fn draw_input(frame: &mut Frame<'_>, app: &App, item_id: &str, text: &str) {
    let title = app
        .inbox
        .iter()
        .find(|i| i.item_id == item_id)
        .map_or_else(String::new, |i| i.title.clone());
    let area = centered(frame.area(), 70, 5);
    frame.render_widget(Clear, area);
    let p = Paragraph::new(vec![Line::from(title), Line::from(format!("> {text}▏"))])
        .wrap(Wrap { trim: false })
        .block(block(" Your answer — Enter sends, Esc ".into(), true));
    frame.render_widget(p, area);
}

fn draw_help(frame: &mut Frame<'_>) {
    let lines = [
        "Tab        parties ⇄ inbox",
        "↑↓ j k     move",
        "o Enter    a member's live output",
        "v          a member's diff",
        "t Esc      the timeline",
        "PgUp PgDn  scroll the lower pane",
        "a d        approve, deny the selected item",
        "1-9        answer with that choice",
        "Enter      pick an answer, or type one",
        "p r        pause/resume, run a schedule",
        "q Ctrl-C   quit",
    ];
    let area = centered(frame.area(), 44, 13);
    frame.render_widget(Clear, area);
    let p = Paragraph::new(lines.iter().map(|l| Line::from(*l)).collect::<Vec<_>>())
        .block(block(" Keys — any key closes ".into(), true));
    frame.render_widget(p, area);
}
