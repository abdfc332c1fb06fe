//! The statuses of a party, its members, roles, tasks, questions, approvals, plans and
//! decisions: closed sets of words (`text_enum!`), the same text in SQLite and on the wire.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

text_enum! {
    /// A party's state.
    PartyStatus {
        Pending = "pending",
        Running = "running",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

impl PartyStatus {
    /// Completed, failed or cancelled: it will not run again.
    pub fn is_over(self) -> bool {
        matches!(
            self,
            PartyStatus::Completed | PartyStatus::Failed | PartyStatus::Cancelled
        )
    }
}

text_enum! {
    /// A party member's state.
    MemberStatus {
        /// Waiting for its role's dependencies.
        Pending = "pending",
        Running = "running",
        Completed = "completed",
        /// Crashed and waiting for a signal (its role is paused).
        Crashed = "crashed",
        /// Crashed; a recovery plugin is deciding (or its restart delay is running).
        Recovering = "recovering",
        /// Given up on (the party failed).
        Failed = "failed",
        Cancelled = "cancelled",
        /// Crashed, then let go with `signal_role proceed`: counts as done.
        Skipped = "skipped",
        /// Stopped by its budget (a circuit breaker, not a crash): its role is paused until a
        /// signal.
        Paused = "paused",
    }
}

impl MemberStatus {
    /// Completed or skipped: counts as done for the roles that depend on it.
    pub fn is_done(self) -> bool {
        matches!(self, MemberStatus::Completed | MemberStatus::Skipped)
    }
}

text_enum! {
    /// A role's state, summed up from its members (`party_status`).
    RoleState {
        Pending = "pending",
        Running = "running",
        Completed = "completed",
        /// A member crashed or hit its budget: the role waits for a signal.
        Paused = "paused",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

text_enum! {
    /// A task's state.
    TaskStatus {
        Open = "open",
        InProgress = "in_progress",
        /// Raised to the person.
        Escalated = "escalated",
        Done = "done",
        Cancelled = "cancelled",
    }
}

text_enum! {
    /// A question to the person (`ask_person`).
    QuestionStatus {
        Pending = "pending",
        Answered = "answered",
        /// The run that asked ended first.
        Expired = "expired",
    }
}

text_enum! {
    /// A permission request.
    ApprovalStatus {
        Pending = "pending",
        Approved = "approved",
        Denied = "denied",
        /// Denied, and the asking run is stopped.
        Aborted = "aborted",
        /// Its run ended before anyone decided.
        Expired = "expired",
    }
}

text_enum! {
    /// A version of a party's plan.
    PlanStatus {
        Draft = "draft",
        Committed = "committed",
        /// A later version was committed.
        Superseded = "superseded",
    }
}

text_enum! {
    /// A decision the party takes together.
    DecisionStatus {
        /// Voting.
        Open = "open",
        /// Voting closed without a majority: the leader or the person breaks the tie.
        Tied = "tied",
        Committed = "committed",
    }
}

text_enum! {
    /// Where a committed plan's step is.
    #[derive(PartialOrd, Ord)]
    StepState {
        Pending = "pending",
        InProgress = "in_progress",
        InReview = "in_review",
        Done = "done",
        Reopened = "reopened",
        Blocked = "blocked",
    }
}

impl StepState {
    /// Whether its owner is working on it (its tool policy and budget apply).
    pub fn is_active(self) -> bool {
        matches!(self, StepState::InProgress)
    }
}

#[cfg(test)]
mod tests;
