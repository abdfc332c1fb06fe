//! Troupe's API: the operation registry's declaration (every operation once: name, summary,
//! params and result types), the wire types, the typed error and its stable codes, and where a
//! daemon keeps its files. Every door, the CLI and the daemon's core share it; it holds no
//! handler, no transport and no business logic (`troupe-core` binds the handlers).
//!
//! `for_each_operation!` holds the one list (`/// summary` + `name(Params) -> Result, Access;`),
//! expanded here into `OPERATIONS` (name, summary, access, JSON Schemas) and in the core into
//! the handler table. Beside it: `SUBSCRIPTIONS`, `parse_params` (absent params are `{}`, only
//! objects are taken; the params types refuse unknown fields) and `schema_document` (`troupe api
//! schema`).

pub mod access;
pub mod error;
pub mod layout;
pub mod types;

use serde_json::Value;

pub use access::{Access, CallerKind};
pub use error::ApiError;
use types::*;

/// One operation, as every door sees it.
pub struct Operation {
    pub name: &'static str,
    pub summary: &'static str,
    /// Who may call it (enforced for every door by the core).
    pub access: Access,
    pub params_schema: fn() -> schemars::Schema,
    pub result_schema: fn() -> schemars::Schema,
}

impl std::fmt::Debug for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// A subscription: a call that answers with a stream of notifications.
#[derive(Debug)]
pub struct Subscription {
    pub name: &'static str,
    pub notification: &'static str,
    pub unsubscribe: &'static str,
    pub summary: &'static str,
    pub params_schema: fn() -> schemars::Schema,
    pub item_schema: fn() -> schemars::Schema,
}

/// Parses an operation's params: absent or `null` means `{}`; anything but an object is refused.
pub fn parse_params<P: serde::de::DeserializeOwned>(
    op: &'static str,
    params: Option<Value>,
) -> Result<P, ApiError> {
    let params = match params {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(v @ Value::Object(_)) => v,
        Some(other) => {
            return Err(ApiError::invalid(
                op,
                format!("params must be a JSON object, not {}", json_kind(&other)),
            ));
        }
    };
    serde_json::from_value(params).map_err(|e| ApiError::invalid(op, e.to_string()))
}

/// How an operation's params take a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Absent,
    Optional,
    Required,
}

/// How `op`'s params take `field`, read from its JSON Schema (worked out once per process). The
/// doors that fill in what a caller left out (the caller's session, its directory) ask this.
pub fn param_field(op: &str, field: &str) -> Field {
    type Fields = (Vec<String>, Vec<String>);
    static FIELDS: std::sync::OnceLock<std::collections::HashMap<&'static str, Fields>> =
        std::sync::OnceLock::new();
    let fields = FIELDS.get_or_init(|| {
        OPERATIONS
            .iter()
            .map(|o| {
                let schema = serde_json::to_value((o.params_schema)()).unwrap_or_default();
                let names = |v: Option<Vec<String>>| v.unwrap_or_default();
                let props = names(
                    schema["properties"]
                        .as_object()
                        .map(|m| m.keys().cloned().collect()),
                );
                let required = names(schema["required"].as_array().map(|r| {
                    r.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                }));
                (o.name, (props, required))
            })
            .collect()
    });
    match fields.get(op) {
        Some((_, required)) if required.iter().any(|f| f == field) => Field::Required,
        Some((props, _)) if props.iter().any(|f| f == field) => Field::Optional,
        _ => Field::Absent,
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The list of operations, handed to a callback macro: `for_each_operation!(my_macro)` expands to
/// `my_macro! { /// doc
/// name(Params) -> Result, Access; ... }` where `Access` is an [`Access`] variant written
/// without its type (`Person`, `Caller("session_id")`, …). The declaration below and the core's
/// handler table are both built from it, so the two cannot drift apart. The type names are
/// those of [`types`]: the caller brings them into scope (`use troupe_api::types::*`).
#[macro_export]
macro_rules! for_each_operation {
    ($callback:ident) => {
        $callback! {
        /// Register a session (an agent CLI or a person) in the project of its working directory.
        register_session(RegisterSessionParams) -> RegisterSessionResult, Anyone;
        /// End a session; its messages stay.
        end_session(SessionIdParams) -> SessionResult, Caller("session_id");
        /// Record that a session is alive.
        heartbeat(SessionIdParams) -> SessionResult, Caller("session_id");
        /// One session by id.
        get_session(SessionIdParams) -> SessionResult, Anyone;
        /// Sessions, optionally of one project, party, parent or status.
        list_sessions(ListSessionsParams) -> SessionsResult, Anyone;
        /// Send a message to any session of the same project (no hierarchy check).
        send_message(SendMessageParams) -> SentMessage, Caller("from_session_id");
        /// Send a message to the session's parent.
        send_to_parent(SendToParentParams) -> SentMessage, Caller("session_id");
        /// Send a message to one of the session's children.
        send_to_child(SendToChildParams) -> SentMessage, Caller("session_id");
        /// Send a message to every active child of the session.
        broadcast_to_children(BroadcastToChildrenParams) -> BroadcastResult, Caller("session_id");
        /// Send a message to every active member of a party.
        broadcast_to_party(BroadcastToPartyParams) -> BroadcastResult, Caller("from_session_id");
        /// Active sessions that share the session's parent.
        list_siblings(SessionIdParams) -> SessionsResult, Anyone;
        /// Find sessions of a project by status (default active) and party.
        discover_agents(DiscoverAgentsParams) -> SessionsResult, Anyone;
        /// A session's messages in delivery order: unread ones, or those after `since`; can wait for one.
        poll_messages(PollMessagesParams) -> PollMessagesResult, Caller("session_id");
        /// Mark a session's messages read.
        mark_read(MarkReadParams) -> MarkReadResult, Caller("session_id");
        /// The durable timeline of what the daemon did.
        list_events(ListEventsParams) -> ListEventsResult, Anyone;
        /// The daemon's version, paths, uptime and row counts.
        daemon_status(NoParams) -> DaemonStatus, Anyone;
        /// Stop the daemon after answering.
        shutdown_daemon(ShutdownParams) -> ShutdownResult, Person;
        /// Apply the retention rules now: old timeline events, read messages, notifications,
        /// answered requests, ended runs (with their logs) and sessions, and checkouts no party
        /// needs (never unmerged or uncommitted work); then VACUUM. `dry_run` only counts.
        gc(GcParams) -> GcResult, Person;
        /// Store a new agent definition (runner, command, isolation, workflow, limits).
        create_agent_definition(AgentDefinitionParams) -> DefinitionResult, Person;
        /// Replace an agent definition.
        update_agent_definition(AgentDefinitionParams) -> DefinitionResult, Person;
        /// One agent definition by name.
        get_agent_definition(NameParams) -> DefinitionResult, Anyone;
        /// Every agent definition.
        list_agent_definitions(NoParams) -> DefinitionsResult, Anyone;
        /// Delete an agent definition.
        delete_agent_definition(NameParams) -> DefinitionResult, Person;
        /// Start a subagent in a child session (refused past the depth limit).
        start_agent(StartAgentParams) -> StartAgentResult, Caller("parent_session_id");
        /// End the caller's agent run with a structured result.
        complete(CompleteParams) -> CompleteResult, Caller("session_id");
        /// Agent runs, by parent session or party.
        list_agents(ListAgentsParams) -> RunsResult, Anyone;
        /// One agent run with its result.
        get_agent_result(RunIdParams) -> RunResult, Anyone;
        /// A run's output so far (its log: a process's stdout and stderr, an ACP agent's words
        /// and tool calls), a byte range at a time; `subscribe_run_log` follows it live.
        get_run_log(RunLogParams) -> RunLogResult, Anyone;
        /// Stop a running subagent.
        cancel_agent(RunIdParams) -> RunResult, RunParent;
        /// A router's step chooses the agent that handles the request (one of its `agents`); it
        /// ends the step, and the chosen agent runs on the original request.
        route_to(RouteToParams) -> RouteToResult, Caller("session_id");
        /// A run and every run it started (pattern steps, subagents), with why each was started,
        /// status, output and usage rolled up to the root; cancelling the root cancels them all.
        get_run_tree(RunIdParams) -> RunTreeResult, Anyone;
        /// A team member's turn shares a message on the team's channel (the others see it before
        /// their next turn).
        team_broadcast(TeamBroadcastParams) -> TeamActResult, Caller("session_id");
        /// A team member's turn votes to conclude (consensus: every member voted).
        vote_conclude(VoteConcludeParams) -> TeamActResult, Caller("session_id");
        /// The team's coordinator gives the team's final answer.
        conclude_team(ConcludeTeamParams) -> TeamActResult, Caller("session_id");
        /// Store a new party definition (validated: agents exist, the flow is a DAG, one leader).
        create_party_definition(PartyDefinitionParams) -> DefinitionResult, OwnAgent(None);
        /// Replace a party definition (parties already launched keep their snapshot).
        update_party_definition(PartyDefinitionParams) -> DefinitionResult, OwnAgent(None);
        /// One party definition by name.
        get_party_definition(NameParams) -> DefinitionResult, Anyone;
        /// Every party definition.
        list_party_definitions(NoParams) -> DefinitionsResult, Anyone;
        /// Delete a party definition.
        delete_party_definition(NameParams) -> DefinitionResult, OwnAgent(None);
        /// Launch a party from a stored definition in a project; its root roles start at once.
        launch_party(LaunchPartyParams) -> LaunchPartyResult, OwnAgent(Some("created_by_session_id"));
        /// A party's roles, members, sessions, statuses, crash counts and tasks.
        get_party_status(PartyIdParams) -> PartyStatusResult, Anyone;
        /// Tell a role to proceed (past crashed members), retry them, or abort the party.
        signal_role(SignalRoleParams) -> PartyResult, Leader;
        /// Change a role's recovery strategy while the party runs.
        override_recovery(OverrideRecoveryParams) -> PartyResult, Leader;
        /// Stop every member; the party ends cancelled.
        cancel_party(PartyIdParams) -> PartyResult, Leader;
        /// Parties, newest first, by project and status.
        list_parties(ListPartiesParams) -> PartiesResult, Anyone;
        /// Move a party's task from one role to another.
        reassign_task(ReassignTaskParams) -> TaskResult, Leader;
        /// Remove a finished party's worktrees and clones (keeps unmerged or uncommitted work unless forced).
        cleanup_party(CleanupPartyParams) -> CleanupResult, Person;
        /// Hold a party's running members, one role's or one member (a process is stopped where it is, an ACP agent's turn is cancelled and resumed in its session when let go, an executor waits at its next tool call).
        pause_party(HoldParams) -> HoldResult, Person;
        /// Let held members go on where they were.
        resume_party(HoldParams) -> HoldResult, Person;
        /// Take over a running agent (ACP): its turn is cancelled, your text goes into its own
        /// session as the next turn and its answer comes back; then it goes on with its task.
        prompt_agent(PromptAgentParams) -> PromptAgentResult, Person;
        /// Every managed checkout (party, member, branch, fork point, ahead/behind, dirty,
        /// changed files).
        list_worktrees(ListWorktreesParams) -> WorktreesResult, Anyone;
        /// A member's committed work against its fork point, file by file with stats (or one
        /// file with both versions).
        get_member_diff(MemberDiffParams) -> MemberDiffResult, Anyone;
        /// A member's commits not on the target, oldest first.
        list_member_commits(MemberParams) -> MemberCommitsResult, Anyone;
        /// Approve a member's work, request changes or comment (on lines or the whole change):
        /// on the timeline and sent to the member, or start a finished member again with it.
        review_member(ReviewMemberParams) -> ReviewMemberResult, Caller("session_id");
        /// The merge queue: members' branches integrated one at a time in DAG order on an
        /// integration branch in its own worktree, tested there, and the target moved only if
        /// the tests pass; a conflict leaves that branch out and tells its member and the person.
        land_party(LandPartyParams) -> LandResult, Person;
        /// Best of N: pick the attempt of a role (`pick` in its definition) that lands; its judge
        /// agent, the leader or the person picks, once.
        pick_member(PickMemberParams) -> PickResult, Caller("session_id");
        /// The conflict radar's current predictions: members' branches (or a branch and the
        /// target) that would conflict, with files and line ranges.
        list_conflicts(ListConflictsParams) -> ConflictsResult, Anyone;
        /// What a party delivered: the request, the plan with each step's owner and state, the
        /// decisions with their ADRs, the last test run and each member's cost, as data and as
        /// Markdown (its pull request's body).
        get_delivery_summary(PartyIdParams) -> DeliverySummary, Anyone;
        /// A party's pull request on the forge and where it stands (checks, rounds of fixes,
        /// ready, merged).
        get_pull_request(PartyIdParams) -> PullRequestView, Anyone;
        /// Merge a party's pull request on the forge with the person's forge credential (only
        /// its head as pushed; the forge refuses what its rules refuse).
        merge_pull_request(MergePullRequestParams) -> PullRequestView, Person;
        /// An event from the forge (the webhook receiver hands it over once its signature is
        /// checked): a label or a mention by someone with write access starts the project's
        /// configured party; checks and reviews wake the pull request's watcher. A delivery
        /// id seen before is refused.
        receive_forge_event(ForgeEventParams) -> ForgeEventResult, Person;
        /// Propose a plan for a party (seed 004): steps with an owner role, acceptance text,
        /// tool policy, budget and dependencies; a new draft version, checked (owners are roles,
        /// no dependency cycle).
        propose_plan(ProposePlanParams) -> PlanResult, Caller("session_id");
        /// A teammate reviews a draft plan: approve or request_changes, with comments.
        review_plan(ReviewPlanParams) -> PlanResult, Caller("session_id");
        /// The leader (or the person) commits a draft plan: a snapshot whose steps are then
        /// executed by their owners under their tool policy and budget.
        commit_plan(CommitPlanParams) -> PlanResult, Caller("session_id");
        /// A party's plan: collaboration state, committed plan, its steps and their states, the
        /// draft under review.
        get_plan(PartyIdParams) -> PlanView, Anyone;
        /// A step's owner starts it (its dependencies done); its tool policy and budget apply
        /// from now on.
        start_step(StepParams) -> StepResult, Caller("session_id");
        /// A step's owner submits its work for review (summary: what was done).
        submit_step(StepParams) -> StepResult, Caller("session_id");
        /// A reviewer accepts a submitted step against its acceptance text, or reopens it.
        review_step(ReviewStepParams) -> StepResult, Caller("session_id");
        /// A step changes owner; the new owner is told the context so far and carries on.
        handoff_step(HandoffStepParams) -> StepResult, Caller("session_id");
        /// A step's owner is blocked: the step is blocked and a decision is raised with the
        /// blocker as topic.
        block_step(BlockStepParams) -> StepResult, Caller("session_id");
        /// Raise a decision for the party's members to vote on within a window.
        propose_decision(ProposeDecisionParams) -> DecisionResult, Caller("session_id");
        /// Vote on an open decision (once; eligible voters only). It commits when everyone has
        /// voted or its window ends; a tie goes to the leader, or to the person without one.
        vote(VoteParams) -> DecisionResult, Caller("session_id");
        /// The leader (or the person) chooses an option: breaks a tie or decides early. The
        /// decision is written as an ADR in the party's branch.
        commit_decision(CommitDecisionParams) -> DecisionResult, Caller("session_id");
        /// A party's decisions (with votes, outcome and ADR path), or every one still open.
        list_decisions(ListDecisionsParams) -> DecisionsResult, Anyone;
        /// What the step tool policies of a session's active steps say of a tool: default,
        /// allow, ask or deny (the MCP door asks before each tool call).
        check_tool_policy(ToolPolicyParams) -> ToolPolicyResult, Anyone;
        /// Create a task.
        create_task(CreateTaskParams) -> TaskResult, Anyone;
        /// Mark a task escalated: the person and the party's leader are notified; the party goes on.
        escalate_task(EscalateTaskParams) -> TaskResult, Caller("session_id");
        /// Tasks, optionally of one party.
        list_tasks(ListTasksParams) -> TasksResult, Anyone;
        /// One inbox: everything waiting for a person, from every door — pending approvals,
        /// paused roles (budget trips included), escalations, decisions to vote on or break,
        /// best-of-N picks, merge conflicts — each with how to answer it.
        list_inbox(ListInboxParams) -> InboxResult, Anyone;
        /// Put away an inbox item that has no answer of its own (an escalation read, a merge
        /// conflict dealt with by hand); answering an item removes it by itself.
        dismiss_inbox_item(InboxItemParams) -> InboxResult, Person;
        /// Durable notifications for the person (escalations, paused roles, finished parties).
        list_notifications(ListNotificationsParams) -> NotificationsResult, Anyone;
        /// The schedules that start parties (`[schedules.<name>]` of each project's
        /// `.troupe/config.toml`, read again now), with their next due time (UTC), paused or
        /// not, their last run and any error.
        list_schedules(ListSchedulesParams) -> SchedulesResult, Anyone;
        /// Pause a schedule: it fires no more until resumed (its due times meanwhile are not run).
        pause_schedule(ScheduleParams) -> ScheduleResult, Person;
        /// Resume a paused schedule: it fires next at its cron's next time from now.
        resume_schedule(ScheduleParams) -> ScheduleResult, Person;
        /// Launch a schedule's party now, with its task; its cron's sequence is unchanged.
        run_schedule_now(ScheduleParams) -> RunScheduleNowResult, Person;
        /// Ask a person for permission and wait (long-poll; resume with approval_id): approved by a matching rule, decided, or denied on timeout.
        request_permission(RequestPermissionParams) -> PermissionResult, Caller("session_id");
        /// Ask a person a question and wait (long-poll; resume with question_id): one of
        /// `choices`, or free text without them. It waits in the inbox; it expires when the
        /// asking run ends.
        ask_person(AskPersonParams) -> QuestionResult, Caller("session_id");
        /// Answer an agent's question (one of its choices, if it offered some).
        answer_question(AnswerQuestionParams) -> AnswerQuestionResult, Person;
        /// Permission requests, by status, party, session or project.
        list_approvals(ListApprovalsParams) -> ApprovalsResult, Anyone;
        /// Answer a pending request: approve, deny, abort (deny and stop the agent) or approve_pattern.
        decide_approval(DecideApprovalParams) -> ApprovalResult, Person;
        /// The approve-pattern rules, revoked ones included.
        list_approval_rules(ListApprovalRulesParams) -> ApprovalRulesResult, Anyone;
        /// Revoke an approve-pattern rule.
        revoke_approval_rule(RuleIdParams) -> ApprovalRuleResult, Person;
        /// Installed plugins (recovery strategies, routers, executors), the folders that failed to
        /// load and why, and the WIT versions this daemon supports.
        list_plugins(NoParams) -> PluginsResult, Anyone;
        /// Install (or upgrade) the plugin in a folder holding plugin.toml and its component; it
        /// replaces the installed one only if it loads.
        install_plugin(InstallPluginParams) -> PluginResult, Person;
        /// Unload a plugin and delete its folder.
        remove_plugin(NameParams) -> RemovePluginResult, Person;
        /// One plugin: manifest, hash, grant, where its code was loaded from.
        get_plugin(NameParams) -> PluginResult, Anyone;
        /// Change what a plugin is granted: HTTP origins, provider key variable, config, limits.
        grant_plugin(GrantPluginParams) -> PluginResult, Person;
        /// Ask a router plugin which agent should take a request.
        route_request(RouteRequestParams) -> RouteResult, Anyone;
        /// A Claude Code hook (what `troupe hook <event>` forwards): registers the session, answers
        /// PreToolUse from Troupe's policy and approvals, records stops and notifications, and
        /// hands over unread messages.
        claude_hook(HookParams) -> HookResult, SelfOrFound("session_id");
        }
    };
}

macro_rules! declare {
    ($( $(#[doc = $doc:literal])+ $name:ident($params:ty) -> $result:ty, $access:expr; )+) => {
        /// Every operation, in the order `troupe api schema` lists them.
        pub static OPERATIONS: &[Operation] = &[$(
            Operation {
                name: stringify!($name),
                summary: concat!($($doc),+),
                access: { #[allow(unused_imports)] use Access::*; $access },
                params_schema: || schemars::schema_for!($params),
                result_schema: || schemars::schema_for!($result),
            },
        )+];
    };
}

for_each_operation!(declare);

/// Every subscription.
pub static SUBSCRIPTIONS: &[Subscription] = &[
    Subscription {
        name: "subscribe_messages",
        notification: "message",
        unsubscribe: "unsubscribe_messages",
        summary: "Push each new message for a session, in delivery order, as a `message` notification.",
        params_schema: || schemars::schema_for!(SubscribeMessagesParams),
        item_schema: || schemars::schema_for!(Message),
    },
    Subscription {
        name: "subscribe_approvals",
        notification: "approvals",
        unsubscribe: "unsubscribe_approvals",
        summary: "Push the pending permission requests at once and after every change.",
        params_schema: || schemars::schema_for!(SubscribeApprovalsParams),
        item_schema: || schemars::schema_for!(ApprovalsResult),
    },
    Subscription {
        name: "subscribe_inbox",
        notification: "inbox",
        unsubscribe: "unsubscribe_inbox",
        summary: "Push the whole inbox (everything waiting for a person) at once and after every change.",
        params_schema: || schemars::schema_for!(ListInboxParams),
        item_schema: || schemars::schema_for!(InboxResult),
    },
    Subscription {
        name: "subscribe_events",
        notification: "event",
        unsubscribe: "unsubscribe_events",
        summary: "Push each new timeline event (of a party, a session or a project), in order, as an `event` notification.",
        params_schema: || schemars::schema_for!(SubscribeEventsParams),
        item_schema: || schemars::schema_for!(Event),
    },
    Subscription {
        name: "subscribe_run_log",
        notification: "run_log",
        unsubscribe: "unsubscribe_run_log",
        summary: "Push a run's output (its log) as it is written, from `offset` (default: the start), until the run ends.",
        params_schema: || schemars::schema_for!(SubscribeRunLogParams),
        item_schema: || schemars::schema_for!(RunLogChunk),
    },
    Subscription {
        name: "subscribe_notifications",
        notification: "notification",
        unsubscribe: "unsubscribe_notifications",
        summary: "Push each new notification for the person (escalations, paused roles, finished parties).",
        params_schema: || schemars::schema_for!(SubscribeNotificationsParams),
        item_schema: || schemars::schema_for!(Notification),
    },
];

/// Looks an operation up by name.
/// Params an agent's tool never shows its model: the door or the runner fills them in from the
/// calling session's credential.
pub const CALLER_FIELDS: &[&str] = &[
    "session_id",
    "from_session_id",
    "parent_session_id",
    "created_by_session_id",
];

/// `op`'s params schema as an agent's tool shows it: without the caller's fields, `$schema`
/// and `title`.
pub fn agent_tool_schema(op: &Operation) -> serde_json::Map<String, Value> {
    let mut schema = serde_json::to_value((op.params_schema)()).unwrap_or_default();
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for f in CALLER_FIELDS {
            props.remove(*f);
        }
    }
    if let Some(req) = schema.get_mut("required").and_then(Value::as_array_mut) {
        req.retain(|f| !f.as_str().is_some_and(|f| CALLER_FIELDS.contains(&f)));
    }
    match schema {
        Value::Object(mut m) => {
            m.remove("$schema");
            m.remove("title");
            m
        }
        _ => serde_json::Map::new(),
    }
}

pub fn operation(name: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|op| op.name == name)
}

/// The JSON Schema document printed by `troupe api schema`.
pub fn schema_document() -> Value {
    let operations: Vec<Value> = OPERATIONS
        .iter()
        .map(|op| {
            serde_json::json!({
                "name": op.name,
                "summary": op.summary.trim(),
                "access": op.access.label(),
                "params": (op.params_schema)(),
                "result": (op.result_schema)(),
            })
        })
        .collect();
    let subscriptions: Vec<Value> = SUBSCRIPTIONS
        .iter()
        .map(|sub| {
            serde_json::json!({
                "name": sub.name,
                "notification": sub.notification,
                "unsubscribe": sub.unsubscribe,
                "summary": sub.summary,
                "params": (sub.params_schema)(),
                "item": (sub.item_schema)(),
            })
        })
        .collect();
    serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "operations": operations,
        "subscriptions": subscriptions,
    })
}
