//! The dashboard's state and keys: what the daemon last said (parties, the inbox, the timeline,
//! a member's output or diff) and what the person's keys ask for. No I/O here: the link talks to
//! the daemon and the view draws, so this is tested as plain data.

use std::collections::VecDeque;

use serde_json::Value;
use troupe_api::types::{
    Event, InboxItem, MemberDiffResult, PartyStatusResult, PartySummary, PullRequestView,
    ScheduleView,
};

/// Timeline events kept for the timeline pane.
const TIMELINE_KEEP: usize = 500;
/// A member's output kept for the output pane (its tail).
const LOG_KEEP: usize = 256 * 1024;

/// What the link tells the dashboard.
#[derive(Debug)]
pub enum Update {
    Connected,
    /// The daemon is gone (or not there yet); the link tries again.
    Disconnected(String),
    /// The parties in scope, newest first (statuses follow one at a time).
    Parties(Vec<PartySummary>),
    Party(Box<PartyStatusResult>),
    /// A party's pull request (`get_pull_request`); `None`: it has none.
    Pull {
        party_id: String,
        pull: Option<Box<PullRequestView>>,
    },
    Inbox(Vec<InboxItem>),
    /// The schedules in scope (`list_schedules`).
    Schedules(Vec<ScheduleView>),
    Event(Box<Event>),
    /// The watched run's output from `offset`.
    Log {
        run_id: String,
        text: String,
        ended: bool,
    },
    Diff {
        member: MemberKey,
        diff: Result<Box<MemberDiffResult>, String>,
    },
    /// A line for the status bar: what an answer did, or why it failed.
    Notice(String),
}

/// What the dashboard asks the link to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Answer an inbox item: its operation with the chosen value filled in.
    Answer {
        title: String,
        op: String,
        params: Value,
    },
    /// Follow this run's output (and stop following the one before).
    WatchLog {
        run_id: String,
    },
    Diff(MemberKey),
}

/// One member of one party.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberKey {
    pub party_id: String,
    pub role: String,
    pub index: u32,
}

/// A key, as the dashboard reads it (the terminal's events mapped to these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Enter,
    Esc,
    Tab,
    Backspace,
    CtrlC,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    Parties,
    Inbox,
    Schedules,
}

/// What the lower pane shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Timeline,
    /// The selected inbox item, whole.
    Item,
    Output,
    Diff,
}

/// A dialog over the panes, if any.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    Normal,
    /// Picking one of an inbox item's choices.
    Pick {
        item_id: String,
        selected: usize,
    },
    /// Typing an answer to a question without choices.
    Input {
        item_id: String,
        text: String,
    },
    Help,
}

/// One line of the parties pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Row {
    Party { party: usize },
    Role { party: usize, role: usize },
    Member { party: usize, member: usize },
}

/// A party as far as the dashboard knows it.
#[derive(Debug)]
pub struct PartyView {
    pub summary: PartySummary,
    pub status: Option<PartyStatusResult>,
    /// Its pull request, when it delivers (or will deliver) one.
    pub pull: Option<PullRequestView>,
}

/// The watched run's output.
#[derive(Debug, Default)]
pub struct LogView {
    pub run_id: String,
    pub text: String,
    pub ended: bool,
}

#[derive(Debug)]
pub struct App {
    /// What the dashboard shows: this directory's project, or every project.
    pub scope: String,
    pub connected: bool,
    pub connection: String,
    pub parties: Vec<PartyView>,
    pub inbox: Vec<InboxItem>,
    /// The schedules, in a pane of their own (the inbox leaves their items out).
    pub schedules: Vec<ScheduleView>,
    pub schedule_row: usize,
    pub timeline: VecDeque<Event>,
    pub log: Option<LogView>,
    pub diff: Option<(MemberKey, Result<Box<MemberDiffResult>, String>)>,
    pub focus: Focus,
    pub pane: Pane,
    pub mode: Mode,
    /// The selected row of the parties pane and of the inbox.
    pub party_row: usize,
    pub inbox_row: usize,
    /// Lines scrolled back from the end (output, timeline) or down from the top (diff, item).
    pub scroll: u16,
    pub notice: Option<String>,
    /// Wall clock for the members' elapsed times (ms since the epoch), set before each draw.
    pub now_ms: i64,
    pub quit: bool,
    /// For the benchmark: events (party, seq, recorded at) whose party's new status is not
    /// drawn yet, and those the next draw is the first to show.
    pub track_latency: bool,
    pub unshown: Vec<(String, i64, String)>,
    pub just_shown: Vec<(i64, String)>,
}

impl App {
    pub fn new(scope: String) -> Self {
        Self {
            scope,
            connected: false,
            connection: "connecting…".into(),
            parties: Vec::new(),
            inbox: Vec::new(),
            schedules: Vec::new(),
            schedule_row: 0,
            timeline: VecDeque::new(),
            log: None,
            diff: None,
            focus: Focus::Parties,
            pane: Pane::Timeline,
            mode: Mode::Normal,
            party_row: 0,
            inbox_row: 0,
            scroll: 0,
            notice: None,
            now_ms: 0,
            quit: false,
            track_latency: false,
            unshown: Vec::new(),
            just_shown: Vec::new(),
        }
    }

    /// Takes in what the daemon said.
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Connected => {
                self.connected = true;
                self.connection = "connected".into();
            }
            Update::Disconnected(why) => {
                self.connected = false;
                self.connection = format!("reconnecting… ({why})");
            }
            Update::Parties(list) => {
                let selected = self.selected_key();
                let mut old = std::mem::take(&mut self.parties);
                self.parties = list
                    .into_iter()
                    .map(|summary| {
                        let was = old
                            .iter_mut()
                            .find(|p| p.summary.party_id == summary.party_id);
                        let (status, pull) =
                            was.map_or((None, None), |p| (p.status.take(), p.pull.take()));
                        PartyView {
                            summary,
                            status,
                            pull,
                        }
                    })
                    .collect();
                self.reselect(selected);
            }
            Update::Party(status) => {
                let selected = self.selected_key();
                let id = status.party.party_id.clone();
                if self.track_latency {
                    let (now, later): (Vec<_>, Vec<_>) =
                        self.unshown.drain(..).partition(|(p, _, _)| *p == id);
                    self.unshown = later;
                    self.just_shown
                        .extend(now.into_iter().map(|(_, seq, at)| (seq, at)));
                }
                match self.parties.iter_mut().find(|p| p.summary.party_id == id) {
                    Some(p) => {
                        p.summary = status.party.clone();
                        p.status = Some(*status);
                    }
                    None => self.parties.insert(
                        0,
                        PartyView {
                            summary: status.party.clone(),
                            status: Some(*status),
                            pull: None,
                        },
                    ),
                }
                self.reselect(selected);
            }
            Update::Pull { party_id, pull } => {
                if let Some(p) = self
                    .parties
                    .iter_mut()
                    .find(|p| p.summary.party_id == party_id)
                {
                    p.pull = pull.map(|b| *b);
                }
            }
            Update::Inbox(items) => {
                let selected = self.inbox.get(self.inbox_row).map(|i| i.item_id.clone());
                // The schedules have a pane of their own.
                self.inbox = items.into_iter().filter(|i| i.kind != "schedule").collect();
                self.inbox_row = selected
                    .and_then(|id| self.inbox.iter().position(|i| i.item_id == id))
                    .unwrap_or(self.inbox_row)
                    .min(self.inbox.len().saturating_sub(1));
                // A dialog for an item that was answered elsewhere closes.
                if let Mode::Pick { item_id, .. } | Mode::Input { item_id, .. } = &self.mode
                    && !self.inbox.iter().any(|i| &i.item_id == item_id)
                {
                    self.mode = Mode::Normal;
                }
            }
            Update::Schedules(list) => {
                let selected = self
                    .schedules
                    .get(self.schedule_row)
                    .map(|s| (s.project_id.clone(), s.name.clone()));
                self.schedules = list;
                self.schedule_row = selected
                    .and_then(|(p, n)| {
                        self.schedules
                            .iter()
                            .position(|s| s.project_id == p && s.name == n)
                    })
                    .unwrap_or(self.schedule_row)
                    .min(self.schedules.len().saturating_sub(1));
                if self.schedules.is_empty() && self.focus == Focus::Schedules {
                    self.focus = Focus::Parties;
                }
            }
            Update::Event(event) => {
                if self.track_latency
                    && let Some(party) = &event.party_id
                {
                    self.unshown
                        .push((party.clone(), event.seq, event.at.clone()));
                }
                if self.timeline.len() == TIMELINE_KEEP {
                    self.timeline.pop_front();
                }
                self.timeline.push_back(*event);
            }
            Update::Log {
                run_id,
                text,
                ended,
            } => {
                let log = match &mut self.log {
                    Some(log) if log.run_id == run_id => log,
                    _ => self.log.insert(LogView {
                        run_id,
                        ..LogView::default()
                    }),
                };
                log.text.push_str(&text);
                log.ended |= ended;
                if log.text.len() > LOG_KEEP {
                    let mut cut = log.text.len() - LOG_KEEP;
                    while !log.text.is_char_boundary(cut) {
                        cut += 1;
                    }
                    log.text.drain(..cut);
                }
            }
            Update::Diff { member, diff } => self.diff = Some((member, diff)),
            Update::Notice(text) => self.notice = Some(text),
        }
    }

    /// The parties pane's lines: each party, its roles and their members.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for (p, party) in self.parties.iter().enumerate() {
            rows.push(Row::Party { party: p });
            let Some(status) = &party.status else {
                continue;
            };
            for r in flow_order(status) {
                let role = &status.roles[r];
                rows.push(Row::Role { party: p, role: r });
                for (m, member) in status.members.iter().enumerate() {
                    if member.role == role.role {
                        rows.push(Row::Member {
                            party: p,
                            member: m,
                        });
                    }
                }
            }
        }
        rows
    }

    /// The member of the selected row (a role of one member counts as that member).
    pub fn selected_member(&self) -> Option<(MemberKey, Option<String>)> {
        let rows = self.rows();
        let (party, member) = match rows.get(self.party_row)? {
            Row::Member { party, member } => (*party, *member),
            Row::Role { party, role } => {
                let status = self.parties[*party].status.as_ref()?;
                let name = &status.roles.get(*role)?.role;
                let mut of_role = status
                    .members
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| &m.role == name);
                let (m, _) = of_role.next()?;
                if of_role.next().is_some() {
                    return None;
                }
                (*party, m)
            }
            Row::Party { .. } => return None,
        };
        let view = &self.parties[party];
        let m = view.status.as_ref()?.members.get(member)?;
        Some((
            MemberKey {
                party_id: view.summary.party_id.clone(),
                role: m.role.clone(),
                index: u32::try_from(m.index).unwrap_or(0),
            },
            m.run_id.clone(),
        ))
    }

    pub fn selected_item(&self) -> Option<&InboxItem> {
        self.inbox.get(self.inbox_row)
    }

    /// Takes a key; returns what to ask of the daemon.
    pub fn key(&mut self, key: Key) -> Vec<Command> {
        if key == Key::CtrlC {
            self.quit = true;
            return Vec::new();
        }
        match self.mode.clone() {
            Mode::Help => {
                self.mode = Mode::Normal;
                Vec::new()
            }
            Mode::Pick { item_id, selected } => self.pick_key(key, item_id, selected),
            Mode::Input { item_id, text } => self.input_key(key, item_id, text),
            Mode::Normal => self.normal_key(key),
        }
    }

    fn normal_key(&mut self, key: Key) -> Vec<Command> {
        self.notice = None;
        match key {
            Key::Char('q') => self.quit = true,
            Key::Char('?') => self.mode = Mode::Help,
            Key::Tab => {
                self.focus = match self.focus {
                    Focus::Parties => Focus::Inbox,
                    Focus::Inbox if !self.schedules.is_empty() => Focus::Schedules,
                    Focus::Inbox | Focus::Schedules => Focus::Parties,
                };
                if self.focus == Focus::Inbox {
                    self.show(Pane::Item);
                } else if self.pane == Pane::Item {
                    self.show(Pane::Timeline);
                }
            }
            Key::Esc => self.show(Pane::Timeline),
            Key::Up | Key::Char('k') => self.move_cursor(-1),
            Key::Down | Key::Char('j') => self.move_cursor(1),
            Key::PageUp => self.scroll = self.scroll.saturating_add(10),
            Key::PageDown => self.scroll = self.scroll.saturating_sub(10),
            Key::Char('t') => self.show(Pane::Timeline),
            _ if self.focus == Focus::Parties => return self.parties_key(key),
            _ if self.focus == Focus::Schedules => return self.schedules_key(key),
            _ => return self.inbox_key(key),
        }
        Vec::new()
    }

    fn parties_key(&mut self, key: Key) -> Vec<Command> {
        match key {
            Key::Char('o') | Key::Enter => {
                let Some((member, run)) = self.selected_member() else {
                    self.notice = Some("select a member (a role of one member will do)".into());
                    return Vec::new();
                };
                let Some(run_id) = run else {
                    self.notice = Some(format!("{}#{} has not run yet", member.role, member.index));
                    return Vec::new();
                };
                self.show(Pane::Output);
                if self.log.as_ref().is_some_and(|l| l.run_id == run_id) {
                    return Vec::new();
                }
                self.log = Some(LogView {
                    run_id: run_id.clone(),
                    ..LogView::default()
                });
                vec![Command::WatchLog { run_id }]
            }
            Key::Char('v') => {
                let Some((member, _)) = self.selected_member() else {
                    self.notice = Some("select a member (a role of one member will do)".into());
                    return Vec::new();
                };
                self.show(Pane::Diff);
                self.diff = None;
                vec![Command::Diff(member)]
            }
            _ => Vec::new(),
        }
    }

    /// `p` pauses the selected schedule (or resumes it, when paused); `r` runs it now.
    fn schedules_key(&mut self, key: Key) -> Vec<Command> {
        let Some(s) = self.schedules.get(self.schedule_row) else {
            return Vec::new();
        };
        let params = serde_json::json!({ "project_id": s.project_id, "name": s.name });
        let (op, title) = match key {
            Key::Char('p') if s.paused => {
                ("resume_schedule", format!("resume schedule {}", s.name))
            }
            Key::Char('p') => ("pause_schedule", format!("pause schedule {}", s.name)),
            Key::Char('r') => ("run_schedule_now", format!("run schedule {} now", s.name)),
            _ => return Vec::new(),
        };
        self.notice = Some(format!("asking: {title}"));
        vec![Command::Answer {
            title,
            op: op.into(),
            params,
        }]
    }

    fn inbox_key(&mut self, key: Key) -> Vec<Command> {
        let Some(item) = self.selected_item() else {
            return Vec::new();
        };
        let item_id = item.item_id.clone();
        let choices = item.answer.choices.clone();
        let pick = |wanted: &[&str]| {
            choices
                .iter()
                .find(|c| c.as_str().is_some_and(|c| wanted.contains(&c)))
                .cloned()
        };
        match key {
            Key::Char('a') => match pick(&["approve", "allow", "yes", "continue", "proceed"]) {
                Some(choice) => return self.answer(&item_id, choice).into_iter().collect(),
                None => {
                    self.notice = Some("this item has no approve: Enter shows its answers".into())
                }
            },
            Key::Char('d') => match pick(&["deny", "reject", "no", "abort", "stop"]) {
                Some(choice) => return self.answer(&item_id, choice).into_iter().collect(),
                None => self.notice = Some("this item has no deny: Enter shows its answers".into()),
            },
            Key::Char(c @ '1'..='9') => {
                let n = c as usize - '1' as usize;
                if let Some(choice) = choices.get(n).cloned() {
                    return self.answer(&item_id, choice).into_iter().collect();
                }
            }
            Key::Enter if choices.is_empty() => {
                self.mode = Mode::Input {
                    item_id,
                    text: String::new(),
                }
            }
            Key::Enter => {
                self.mode = Mode::Pick {
                    item_id,
                    selected: 0,
                }
            }
            _ => {}
        }
        Vec::new()
    }

    fn pick_key(&mut self, key: Key, item_id: String, selected: usize) -> Vec<Command> {
        let count = self
            .inbox
            .iter()
            .find(|i| i.item_id == item_id)
            .map_or(0, |i| i.answer.choices.len());
        match key {
            Key::Esc | Key::Char('q') => self.mode = Mode::Normal,
            Key::Up | Key::Char('k') => {
                self.mode = Mode::Pick {
                    item_id,
                    selected: selected.saturating_sub(1),
                }
            }
            Key::Down | Key::Char('j') => {
                self.mode = Mode::Pick {
                    item_id,
                    selected: (selected + 1).min(count.saturating_sub(1)),
                }
            }
            Key::Enter => {
                self.mode = Mode::Normal;
                let choice = self
                    .inbox
                    .iter()
                    .find(|i| i.item_id == item_id)
                    .and_then(|i| i.answer.choices.get(selected).cloned());
                if let Some(choice) = choice {
                    return self.answer(&item_id, choice).into_iter().collect();
                }
            }
            _ => {}
        }
        Vec::new()
    }

    fn input_key(&mut self, key: Key, item_id: String, mut text: String) -> Vec<Command> {
        match key {
            Key::Esc => self.mode = Mode::Normal,
            Key::Enter => {
                self.mode = Mode::Normal;
                if !text.trim().is_empty() {
                    return self
                        .answer(&item_id, Value::String(text))
                        .into_iter()
                        .collect();
                }
            }
            Key::Backspace => {
                text.pop();
                self.mode = Mode::Input { item_id, text };
            }
            Key::Char(c) => {
                text.push(c);
                self.mode = Mode::Input { item_id, text };
            }
            _ => {}
        }
        Vec::new()
    }

    /// The call that answers `item_id` with `value` (in its choice field).
    fn answer(&mut self, item_id: &str, value: Value) -> Option<Command> {
        let item = self.inbox.iter().find(|i| i.item_id == item_id)?;
        let mut params = item.answer.params.clone();
        let field = item.answer.choice_field.as_deref().unwrap_or("answer");
        if let Value::Object(map) = &mut params {
            map.insert(field.to_string(), value.clone());
        }
        let said = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        self.notice = Some(format!("answering {}: {said}", item.title));
        Some(Command::Answer {
            title: item.title.clone(),
            op: item.answer.op.clone(),
            params,
        })
    }

    fn show(&mut self, pane: Pane) {
        if self.pane != pane {
            self.scroll = 0;
        }
        self.pane = pane;
    }

    fn move_cursor(&mut self, by: isize) {
        let rows = self.rows().len();
        let (row, len) = match self.focus {
            Focus::Parties => (&mut self.party_row, rows),
            Focus::Inbox => (&mut self.inbox_row, self.inbox.len()),
            Focus::Schedules => (&mut self.schedule_row, self.schedules.len()),
        };
        let next = row.saturating_add_signed(by);
        *row = next.min(len.saturating_sub(1));
        if self.focus == Focus::Inbox {
            self.scroll = 0;
        }
    }

    /// What the selected parties row is, to find it again after the rows change.
    fn selected_key(&self) -> Option<(String, Option<String>, Option<i64>)> {
        let rows = self.rows();
        let row = rows.get(self.party_row)?;
        let key = match row {
            Row::Party { party } => (self.parties[*party].summary.party_id.clone(), None, None),
            Row::Role { party, role } => {
                let p = &self.parties[*party];
                let role = p.status.as_ref()?.roles.get(*role)?.role.clone();
                (p.summary.party_id.clone(), Some(role), None)
            }
            Row::Member { party, member } => {
                let p = &self.parties[*party];
                let m = p.status.as_ref()?.members.get(*member)?;
                (
                    p.summary.party_id.clone(),
                    Some(m.role.clone()),
                    Some(m.index),
                )
            }
        };
        Some(key)
    }

    fn reselect(&mut self, key: Option<(String, Option<String>, Option<i64>)>) {
        let rows = self.rows();
        if let Some(key) = key {
            let found = rows.iter().position(|row| {
                let p = match row {
                    Row::Party { party } | Row::Role { party, .. } | Row::Member { party, .. } => {
                        &self.parties[*party]
                    }
                };
                if p.summary.party_id != key.0 {
                    return false;
                }
                match row {
                    Row::Party { .. } => key.1.is_none(),
                    Row::Role { role, .. } => {
                        key.2.is_none()
                            && p.status
                                .as_ref()
                                .and_then(|s| s.roles.get(*role))
                                .is_some_and(|r| Some(&r.role) == key.1.as_ref())
                    }
                    Row::Member { member, .. } => p
                        .status
                        .as_ref()
                        .and_then(|s| s.members.get(*member))
                        .is_some_and(|m| Some(&m.role) == key.1.as_ref() && Some(m.index) == key.2),
                }
            });
            if let Some(i) = found {
                self.party_row = i;
                return;
            }
        }
        self.party_row = self.party_row.min(rows.len().saturating_sub(1));
    }
}

/// The roles' indexes in the order work flows: those depending on nothing first, then each
/// after what it depends on (by name within a depth).
fn flow_order(status: &PartyStatusResult) -> Vec<usize> {
    fn depth(status: &PartyStatusResult, role: usize, seen: &mut Vec<usize>) -> usize {
        if seen.contains(&role) {
            return 0; // a cycle (refused at definition): stop
        }
        seen.push(role);
        let d = status.roles[role]
            .depends_on
            .iter()
            .filter_map(|dep| status.roles.iter().position(|r| &r.role == dep))
            .map(|dep| depth(status, dep, seen) + 1)
            .max()
            .unwrap_or(0);
        seen.pop();
        d
    }
    let mut order: Vec<(usize, usize)> = (0..status.roles.len())
        .map(|r| (depth(status, r, &mut Vec::new()), r))
        .collect();
    order.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| status.roles[a.1].role.cmp(&status.roles[b.1].role))
    });
    order.into_iter().map(|(_, r)| r).collect()
}
