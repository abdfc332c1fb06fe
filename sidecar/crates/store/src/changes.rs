//! What a commit changed that somebody waits on: the pending approvals, the person's
//! notifications, best-of-N picks, the inbox. This is the one place those feeds learn of changes. A write job
//! marks a topic where it writes: the timeline event it appends (`event_topic` maps event
//! kinds to topics), the notification it inserts, the party status or paused roles it changes.
//! The writer announces the topics its group marked once that group has committed. A failed
//! job's marks are dropped with its changes.
//!
//! Marks live in a thread-local on the writer thread. A read job that marked something would
//! mark its own thread's set, which nobody announces; `mark` is crate-private for that reason.

use std::cell::Cell;

use tokio::sync::watch;

#[cfg(test)]
mod tests;

/// A feed that waits on the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// A permission request appeared, was decided or expired.
    Approvals,
    /// A notification for the person was recorded.
    Notifications,
    /// A best-of-N role got its pick, or its judge ended.
    Picks,
    /// Something the inbox is made of may have changed. Every other topic implies it.
    Inbox,
}

impl Topic {
    const ALL: [Topic; 4] = [
        Topic::Approvals,
        Topic::Notifications,
        Topic::Picks,
        Topic::Inbox,
    ];

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

thread_local! {
    static MARKED: Cell<u8> = const { Cell::new(0) };
}

/// Marks `topic` changed by the write job running on this (the writer's) thread.
pub(crate) fn mark(topic: Topic) {
    MARKED.with(|m| m.set(m.get() | topic.bit()));
}

/// The marks so far, to restore if the next job fails.
pub(crate) fn marked() -> u8 {
    MARKED.with(Cell::get)
}

/// Drops the marks made since `before` (a job that failed, or a group retried).
pub(crate) fn reset_to(before: u8) {
    MARKED.with(|m| m.set(before));
}

/// Takes the marks of the group that just committed (or failed).
pub(crate) fn take() -> u8 {
    MARKED.with(|m| m.replace(0))
}

/// The topic a timeline event of this kind changes, if any.
pub(crate) fn event_topic(kind: &str) -> Option<Topic> {
    match kind {
        "approval_requested" | "approval_decided" | "approval_expired" => Some(Topic::Approvals),
        "member_picked" => Some(Topic::Picks),
        "question_asked" | "question_answered" | "question_expired" | "decision_proposed"
        | "decision_voted" | "decision_tied" | "decision_committed" | "task_escalated"
        | "task_reassigned" | "inbox_dismissed" | "merge_conflict" | "party_landed"
        | "party_delivered" => Some(Topic::Inbox),
        // Each schedule is an inbox item, its title and answer from its state.
        "schedule_added" | "schedule_changed" | "schedule_removed" | "schedule_error"
        | "schedule_fired" | "schedule_missed" | "schedule_launched" | "schedule_failed"
        | "schedule_paused" | "schedule_resumed" => Some(Topic::Inbox),
        _ => None,
    }
}

/// One change counter per topic.
#[derive(Debug, Clone)]
pub(crate) struct Announcer {
    topics: [watch::Sender<i64>; 4],
}

impl Announcer {
    pub(crate) fn new() -> Announcer {
        Announcer {
            topics: Topic::ALL.map(|_| watch::channel(0).0),
        }
    }

    pub(crate) fn subscribe(&self, topic: Topic) -> watch::Receiver<i64> {
        self.topics[topic as usize].subscribe()
    }

    /// Bumps every marked topic's counter, and the inbox's whenever any changed (the inbox
    /// shows them all).
    pub(crate) fn announce(&self, marks: u8) {
        let mut marks = marks;
        if marks != 0 {
            marks |= Topic::Inbox.bit();
        }
        for topic in Topic::ALL {
            if marks & topic.bit() != 0 {
                self.topics[topic as usize].send_modify(|n| *n += 1);
            }
        }
    }

    pub(crate) fn announce_one(&self, topic: Topic) {
        self.announce(topic.bit());
    }
}
