//! Troupe's engine: pure, deterministic state machines and definitions. Agent definitions
//! (`agent`), party definitions and their validation (`spec`), the party scheduler (`party`) and
//! run-level patterns (`pattern`: handoff, router, advisors), the collaboration protocol's rules
//! (`collab`: plans, step states, tool policies, vote tallies, ADRs): inputs in, actions out, time passed in. No IO,
//! no tokio, no clock reads — the daemon carries out the actions.

pub mod agent;
pub mod collab;
mod names;
pub mod party;
pub mod pattern;
pub mod spec;

pub use agent::{
    AcpOptions, AgentDefinition, AgentOverrides, BoxSettings, Budget, Isolation, LandOptions,
    LandStrategy, LandTo, RouterSpec, Spent, TeamSpec, Termination, Workflow, acp_default_command,
};
pub use party::{
    Action, Decision, Input, Member, MemberStatus, Party, PartyStatus, Signal, StepError,
};
pub use spec::{
    NotifyTarget, PartyDefinition, PickSpec, RecoveryConfig, RoleDefinition, SpecError, Strategy,
    is_safe_name,
};

#[cfg(test)]
mod tests;
