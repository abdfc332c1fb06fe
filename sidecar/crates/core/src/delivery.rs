//! What a party delivered, for people: the request, the committed plan with each step's owner
//! and state, the decisions with their ADRs, the last test run and each member's cost. One
//! builder for every place that shows it — a pull request's body, `get_delivery_summary`,
//! the dashboards — read from the store alone.

use std::collections::BTreeMap;

use troupe_api::ApiError;
use troupe_api::types::{DeliveryDecision, DeliveryStep, DeliverySummary, MemberCost, TestRun};
use troupe_store::Store;

/// The most of the request a summary repeats.
const REQUEST_CHARS: usize = 2000;

/// The summary of party `party_id` as it stands.
pub fn summary(store: &Store, party_id: &str) -> Result<DeliverySummary, ApiError> {
    let (row, _members) = store.get_party(party_id)?;
    let link = store.get_forge_link(party_id)?;
    let issue = link
        .as_ref()
        .and_then(|l| l.issue_number.map(|n| format!("{}#{n}", l.repo)));
    let request = row
        .inputs
        .as_ref()
        .and_then(|i| i.get("title").or_else(|| i.get("task")))
        .and_then(|t| t.as_str())
        .unwrap_or("(no task given)")
        .to_string();
    let steps = store
        .plan_steps(party_id)?
        .into_iter()
        .map(|s| DeliveryStep {
            title: s
                .spec
                .get("title")
                .and_then(|t| t.as_str())
                .unwrap_or(&s.step_id)
                .to_string(),
            step_id: s.step_id,
            owner: s.owner_role,
            state: serde_json::to_value(s.state)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
        })
        .collect();
    let decisions = store
        .list_decisions(Some(party_id))?
        .into_iter()
        .map(|d| DeliveryDecision {
            topic: d.topic,
            status: serde_json::to_value(d.status)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            outcome: d.chosen,
            adr_path: d.adr_path,
        })
        .collect();
    let test = store
        .latest_party_events(party_id, &["land_tests_passed", "land_tests_failed"], 1)?
        .into_iter()
        .next()
        .map(|e| {
            let passed = e.kind == "land_tests_passed";
            let data = if passed { &e.data } else { &e.data["test"] };
            TestRun {
                command: data["command"].as_str().unwrap_or_default().to_string(),
                passed,
                exit_code: data["exit_code"]
                    .as_i64()
                    .and_then(|c| i32::try_from(c).ok()),
                output: data["output"].as_str().unwrap_or_default().to_string(),
            }
        });
    let mut costs: BTreeMap<(String, i64), MemberCost> = BTreeMap::new();
    for run in store.list_runs(None, Some(party_id), false)? {
        let (Some(role), Some(index)) = (run.role_name.clone(), run.instance_index) else {
            continue;
        };
        let usage = store.usage("run", &run.run_id)?;
        let c = costs.entry((role.clone(), index)).or_insert(MemberCost {
            role,
            index,
            agent: run.agent_name.clone(),
            runs: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
        });
        c.runs += 1;
        c.input_tokens += usage.input_tokens;
        c.output_tokens += usage.output_tokens;
        c.cost_usd += usage.cost_usd;
    }
    let members: Vec<MemberCost> = costs.into_values().collect();
    let total_cost_usd = members.iter().map(|m| m.cost_usd).sum();
    let mut s = DeliverySummary {
        party_id: row.party_id.clone(),
        party_name: row.name.clone(),
        request,
        issue,
        steps,
        decisions,
        test,
        members,
        total_cost_usd,
        markdown: String::new(),
    };
    s.markdown = markdown(&s);
    Ok(s)
}

/// Text from agents or the forge, made inert in Markdown: no HTML, no mention, no table break.
fn inert(text: &str) -> String {
    text.replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('@', "@\u{200b}")
        .replace('|', "\\|")
        .replace('\n', " ")
}

/// The summary as Markdown (a pull request's body).
pub fn markdown(s: &DeliverySummary) -> String {
    let mut out = String::new();
    let request: String = s.request.chars().take(REQUEST_CHARS).collect();
    let request = request.lines().next().unwrap_or_default();
    out.push_str(&format!("## {}\n\n", inert(request)));
    if let Some(issue) = &s.issue {
        let number = issue.rsplit('#').next().unwrap_or_default();
        out.push_str(&format!("Closes #{number}.\n\n"));
    }
    out.push_str(&format!(
        "Delivered by the Troupe party **{}** (`{}`).\n\n",
        inert(&s.party_name),
        s.party_id
    ));
    out.push_str("### Plan\n\n");
    if s.steps.is_empty() {
        out.push_str("No committed plan.\n\n");
    } else {
        out.push_str("| Step | Owner | State |\n|---|---|---|\n");
        for step in &s.steps {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                inert(&step.title),
                inert(&step.owner),
                step.state
            ));
        }
        out.push('\n');
    }
    out.push_str("### Decisions\n\n");
    if s.decisions.is_empty() {
        out.push_str("None taken.\n\n");
    } else {
        for d in &s.decisions {
            let outcome = d
                .outcome
                .as_deref()
                .map(inert)
                .unwrap_or_else(|| "open".into());
            let adr = d
                .adr_path
                .as_deref()
                .map(|p| format!(" — [ADR]({p})"))
                .unwrap_or_default();
            out.push_str(&format!("- {}: **{outcome}**{adr}\n", inert(&d.topic)));
        }
        out.push('\n');
    }
    out.push_str("### Tests\n\n");
    match &s.test {
        Some(t) => out.push_str(&format!(
            "`{}`: {}\n\n",
            t.command.replace('`', "'"),
            if t.passed { "passed" } else { "failed" }
        )),
        None => out.push_str("No test command ran.\n\n"),
    }
    out.push_str("### Cost\n\n| Member | Agent | Runs | Tokens in | Tokens out | USD |\n|---|---|---|---|---|---|\n");
    for m in &s.members {
        out.push_str(&format!(
            "| {}#{} | {} | {} | {} | {} | {:.4} |\n",
            inert(&m.role),
            m.index,
            inert(&m.agent),
            m.runs,
            m.input_tokens,
            m.output_tokens,
            m.cost_usd
        ));
    }
    out.push_str(&format!("\nTotal: {:.4} USD.\n", s.total_cost_usd));
    out.push_str(
        "\n<sub>Pushed and opened by the Troupe daemon with its owner's forge credential; no \
         member saw it.</sub>\n",
    );
    out
}
