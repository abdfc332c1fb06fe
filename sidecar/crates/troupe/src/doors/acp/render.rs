//! What the ACP door shows of the timeline: each event of a turn (a party's, or an agent run's)
//! becomes zero or more ACP updates. Pure: the door feeds it events and the party's status.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde_json::Value;

use super::wire::{Out, PlanOut, ToolCallOut};

/// Longest text of one event shown.
const MAX_TEXT: usize = 4000;

/// What one turn has seen so far.
#[derive(Debug, Default)]
pub struct Render {
    /// Each member's label (`role#index`, or the agent's name) by session and by run.
    labels: HashMap<String, String>,
    /// Tool calls already shown (later reports are updates).
    calls: HashSet<String>,
}

/// What an event means for the turn.
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    pub out: Vec<Out>,
    /// Members moved on: the plan is worth redrawing.
    pub plan_changed: bool,
    /// The party ended (its status).
    pub party_ended: Option<String>,
    /// A run ended: (run id, status).
    pub run_ended: Option<(String, String)>,
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_TEXT {
        return s.to_string();
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}[…]", &s[..end])
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

impl Render {
    /// A member's label, known from its run's creation.
    pub fn label(&self, session: Option<&str>, run: Option<&str>) -> String {
        self.known(session, run).unwrap_or_else(|| "troupe".into())
    }

    /// A member's label if this turn has seen its run start (a request can come before the
    /// event does: the two feeds are apart).
    pub fn known(&self, session: Option<&str>, run: Option<&str>) -> Option<String> {
        run.and_then(|r| self.labels.get(r))
            .or_else(|| session.and_then(|s| self.labels.get(s)))
            .cloned()
    }

    /// One timeline event (as `list_events` and `subscribe_events` give it).
    pub fn event(&mut self, e: &Value) -> Step {
        let kind = str_of(e, "kind").unwrap_or_default();
        let data = e.get("data").cloned().unwrap_or(Value::Null);
        let session = str_of(e, "session_id");
        let run = str_of(&data, "run_id");
        let mut step = Step::default();
        match kind {
            "agent_run_created" => {
                let label = match str_of(&data, "role") {
                    Some(role) => {
                        let index = data.get("instance_index").and_then(Value::as_i64);
                        match index {
                            Some(i) if i > 0 => format!("{role}#{i}"),
                            _ => role.to_string(),
                        }
                    }
                    None => str_of(&data, "agent").unwrap_or("agent").to_string(),
                };
                if let Some(s) = session {
                    self.labels.insert(s.to_string(), label.clone());
                }
                if let Some(r) = run {
                    self.labels.insert(r.to_string(), label);
                }
            }
            "agent_message" => {
                if let Some(text) = str_of(&data, "text") {
                    let who = self.label(session, run);
                    step.out
                        .push(Out::Text(format!("**[{who}]** {}\n\n", cut(text))));
                }
            }
            "agent_tool_call" => {
                let call_id = str_of(&data, "tool_call_id").unwrap_or_default();
                let id = format!("{}/{call_id}", run.unwrap_or("run"));
                let started = self.calls.insert(id.clone());
                let who = self.label(session, run);
                step.out.push(Out::ToolCall(Box::new(ToolCallOut {
                    id,
                    started,
                    title: str_of(&data, "title").map(|t| format!("[{who}] {t}")),
                    kind: str_of(&data, "kind").map(str::to_string),
                    status: str_of(&data, "status").map(str::to_string),
                    locations: data
                        .get("locations")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|p| (PathBuf::from(p), None))
                        .collect(),
                    diffs: data
                        .get("diffs")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|d| {
                            Some((
                                PathBuf::from(str_of(d, "path")?),
                                str_of(d, "old_text").map(str::to_string),
                                str_of(d, "new_text")?.to_string(),
                            ))
                        })
                        .collect(),
                    text: None,
                    raw_input: None,
                })));
            }
            "agent_usage" => {
                let n = |k: &str| data.get(k).and_then(Value::as_u64);
                if let (Some(used), Some(size)) = (n("context_used"), n("context_size")) {
                    step.out.push(Out::Usage {
                        used,
                        size,
                        cost_usd: data.get("cost_usd").and_then(Value::as_f64),
                    });
                }
            }
            "agent_run_finished" => {
                let who = self.label(session, run);
                let status = str_of(&data, "status").unwrap_or("ended").to_string();
                let said = match (str_of(&data, "output"), str_of(&data, "error")) {
                    (Some(out), _) => format!("**[{who}]** {status}: {}\n\n", cut(out)),
                    (None, Some(err)) => format!("**[{who}]** {status}: {}\n\n", cut(err)),
                    (None, None) => format!("**[{who}]** {status}\n\n"),
                };
                step.out.push(Out::Text(said));
                if let Some(r) = run {
                    step.run_ended = Some((r.to_string(), status));
                }
            }
            "member_spawning" | "member_completed" | "member_crashed" | "member_skipped"
            | "role_completed" | "member_restarted" | "party_launched" | "member_picked" => {
                step.plan_changed = true;
            }
            "notification" => {
                if let Some(text) = str_of(&data, "text") {
                    step.out.push(Out::Thought(format!("{}\n", cut(text))));
                }
            }
            "task_escalated" => {
                let reason = str_of(&data, "reason").unwrap_or("no reason given");
                step.out.push(Out::Text(format!(
                    "⚑ escalated to you: {}\n\n",
                    cut(reason)
                )));
            }
            "party_landed" => {
                let target = str_of(&data, "target").unwrap_or("the target");
                let landed = data.get("landed").and_then(Value::as_bool) == Some(true);
                step.out.push(Out::Text(if landed {
                    format!("Landed on {target}.\n\n")
                } else {
                    format!("Nothing landed on {target}.\n\n")
                }));
            }
            "merge_conflict" => {
                let files = data
                    .get("files")
                    .and_then(Value::as_array)
                    .map(|f| {
                        f.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                let who = str_of(&data, "role").unwrap_or("a member");
                step.out.push(Out::Text(format!(
                    "⚠ {who}'s branch conflicts ({files}): left out of the landing.\n\n"
                )));
            }
            "party_finished" => {
                let status = str_of(&data, "status").unwrap_or("finished").to_string();
                let reason = str_of(&data, "reason").unwrap_or_default();
                step.out
                    .push(Out::Text(format!("Party {status}: {reason}\n")));
                step.plan_changed = true;
                step.party_ended = Some(status);
            }
            _ => {}
        }
        step
    }
}

/// The ACP plan of a party: its committed plan's steps if it has them, else its roles.
pub fn plan_of(status: &Value, plan: Option<&Value>) -> Vec<PlanOut> {
    let steps = plan
        .and_then(|p| p.get("steps"))
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty());
    if let Some(steps) = steps {
        return steps
            .iter()
            .map(|s| {
                let title = s
                    .get("spec")
                    .and_then(|spec| str_of(spec, "title"))
                    .or(str_of(s, "step_id"))
                    .unwrap_or("step");
                let owner = str_of(s, "owner_role").unwrap_or("?");
                PlanOut {
                    content: format!("{title} ({owner})"),
                    status: match str_of(s, "state") {
                        Some("done") => "completed",
                        Some("pending") | None => "pending",
                        Some(_) => "in_progress",
                    },
                }
            })
            .collect();
    }
    status
        .get("roles")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let role = str_of(r, "role").unwrap_or("?");
            let agent = str_of(r, "agent").unwrap_or("?");
            let count = r.get("count").and_then(Value::as_u64).unwrap_or(1);
            let done = r.get("completed").and_then(Value::as_u64).unwrap_or(0);
            let content = if count > 1 {
                format!("{role}: {agent} ×{count} ({done}/{count} done)")
            } else {
                format!("{role}: {agent}")
            };
            PlanOut {
                content,
                status: match str_of(r, "status") {
                    Some("completed") => "completed",
                    Some("pending") | None => "pending",
                    Some(_) => "in_progress",
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ev(kind: &str, session: &str, data: Value) -> Value {
        json!({"kind": kind, "session_id": session, "data": data})
    }

    #[test]
    fn members_speak_under_their_role_and_tool_calls_start_once() {
        let mut r = Render::default();
        r.event(&ev(
            "agent_run_created",
            "s1",
            json!({"run_id": "r1", "role": "developer", "instance_index": 1}),
        ));
        let said = r.event(&ev(
            "agent_message",
            "s1",
            json!({"text": "hi", "run_id": "r1"}),
        ));
        assert_eq!(said.out, vec![Out::Text("**[developer#1]** hi\n\n".into())]);
        let call = json!({"run_id": "r1", "tool_call_id": "t", "title": "Write", "kind": "edit",
                          "status": "pending", "locations": ["/w/a.txt"],
                          "diffs": [{"path": "/w/a.txt", "new_text": "x"}]});
        let first = r.event(&ev("agent_tool_call", "s1", call.clone()));
        let again = r.event(&ev("agent_tool_call", "s1", call));
        let started = |s: &Step| match &s.out[0] {
            Out::ToolCall(t) => (t.started, t.id.clone(), t.diffs.len(), t.locations.len()),
            other => panic!("{other:?}"),
        };
        assert_eq!(started(&first), (true, "r1/t".into(), 1, 1));
        assert_eq!(started(&again), (false, "r1/t".into(), 1, 1));
        let end = r.event(&ev(
            "party_finished",
            "",
            json!({"status": "completed", "reason": "every role completed"}),
        ));
        assert_eq!(end.party_ended.as_deref(), Some("completed"));
        assert!(end.plan_changed);
    }

    #[test]
    fn the_plan_is_the_roles_or_the_committed_steps() {
        let status = json!({"roles": [
            {"role": "leader", "agent": "a", "count": 1, "completed": 1, "status": "completed"},
            {"role": "dev", "agent": "b", "count": 2, "completed": 1, "status": "running"},
            {"role": "qa", "agent": "c", "count": 1, "completed": 0, "status": "pending"}]});
        let plan = plan_of(&status, None);
        assert_eq!(
            plan,
            vec![
                PlanOut {
                    content: "leader: a".into(),
                    status: "completed"
                },
                PlanOut {
                    content: "dev: b ×2 (1/2 done)".into(),
                    status: "in_progress"
                },
                PlanOut {
                    content: "qa: c".into(),
                    status: "pending"
                },
            ]
        );
        let steps = json!({"steps": [{"step_id": "s1", "spec": {"title": "Parse"},
                                      "owner_role": "dev", "state": "in_review"}]});
        assert_eq!(
            plan_of(&status, Some(&steps)),
            vec![PlanOut {
                content: "Parse (dev)".into(),
                status: "in_progress"
            }]
        );
    }
}
