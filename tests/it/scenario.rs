//! A scenario, so that a test says only what it checks: a real daemon, the person's client, a
//! project (a git repository with a first commit on `main`) and puppet members, process agents
//! that do what the test says (write a file and commit it, wait to be told to finish, crash),
//! each defined in one line. The timeline, the notifications and the inbox read in one call.

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::support::{TestDaemon, define, executable, git, launch, party_end, repo};

/// What a puppet member does when it runs, in its own checkout (a worktree of the project).
#[derive(Debug, Clone, Copy)]
pub enum Puppet<'a> {
    /// Writes `file` with `text`, commits it on its branch and completes.
    Commits(&'a str, &'a str),
    /// The same, then waits until a message says "finish now" before it completes.
    CommitsThenWaits(&'a str, &'a str),
    /// Completes at once, having changed nothing.
    Idle,
    /// Exits at once with this code, without completing: a crash.
    Crashes(i32),
}

/// A daemon, the person's client and a project.
pub struct Scenario {
    pub daemon: TestDaemon,
    /// The person's client (the daemon's token).
    pub person: Client,
    /// The project's root: a git repository with one commit on `main`.
    pub project: String,
}

impl Scenario {
    pub async fn new() -> Scenario {
        Scenario::on(TestDaemon::start()).await
    }

    /// On a daemon started with other arguments or settings.
    pub async fn on(daemon: TestDaemon) -> Scenario {
        let person = daemon.client().await;
        let project = repo(&daemon.dir.path().join("proj"));
        Scenario {
            daemon,
            person,
            project,
        }
    }

    /// kill -9 the daemon, start it again on the same data dir and reconnect the person.
    pub async fn kill9_and_restart(&mut self) {
        self.daemon.kill9();
        self.daemon.spawn();
        self.person = self.daemon.client().await;
    }

    /// The scenario's own directory (the daemon's data dir and the project are inside).
    pub fn dir(&self) -> &Path {
        self.daemon.dir.path()
    }

    /// The directory the test shares with its members (`TestDaemon::shared`).
    pub fn shared(&self) -> std::path::PathBuf {
        self.daemon.shared()
    }

    /// Defines agent `name`: a puppet working in a worktree of its own.
    pub async fn puppet(&self, name: &str, what: Puppet<'_>) {
        let command = match what {
            Puppet::Crashes(code) => json!(["sh", "-c", format!("exit {code}")]),
            Puppet::Commits(file, text) => json!([puppet_script(self.dir()), file, text, "-"]),
            Puppet::CommitsThenWaits(file, text) => {
                json!([puppet_script(self.dir()), file, text, "wait"])
            }
            Puppet::Idle => json!([puppet_script(self.dir()), "-", "", "-"]),
        };
        define(
            &self.person,
            "agent",
            json!({ "name": name, "command": command, "isolation": "worktree",
                    "timeout_secs": 120 }),
        )
        .await;
    }

    /// Defines party `name` with a role per (role, puppet): role `r` runs agent `<name>-<r>`,
    /// and recovers from a crash by a restart.
    pub async fn party(&self, name: &str, roles: &[(&str, Puppet<'_>)]) {
        let mut defined = serde_json::Map::new();
        for (role, what) in roles {
            let agent = format!("{name}-{role}");
            self.puppet(&agent, *what).await;
            defined.insert(
                role.to_string(),
                json!({ "agent": agent, "on_crash": "restart" }),
            );
        }
        define(
            &self.person,
            "party",
            json!({ "name": name, "roles": defined }),
        )
        .await;
    }

    /// Launches party `name` in the project; its id.
    pub async fn launch(&self, name: &str) -> String {
        launch(&self.person, name, &self.project).await
    }

    /// Waits (60 s at most) for the party to end; its `get_party_status`.
    pub async fn ended(&self, party_id: &str) -> Value {
        party_end(&self.person, party_id, 60).await
    }

    /// `land_party`, as the person.
    pub async fn land(&self, party_id: &str) -> Value {
        self.person
            .call("land_party", json!({ "party_id": party_id }))
            .await
            .unwrap_or_else(|e| panic!("landing {party_id}: {e}"))
    }

    /// Git in the project, its output trimmed.
    pub fn git(&self, args: &[&str]) -> String {
        git(&self.project, args)
    }

    /// The party's timeline entries of `kind`, oldest first.
    pub async fn events(&self, party_id: &str, kind: &str) -> Vec<Value> {
        let r = self
            .person
            .call("list_events", json!({ "party_id": party_id, "kind": kind }))
            .await
            .unwrap();
        r["events"].as_array().unwrap().clone()
    }

    /// The person's notifications of `kind` about the party.
    pub async fn notifications(&self, party_id: &str, kind: &str) -> Vec<Value> {
        let r = self
            .person
            .call("list_notifications", json!({ "party_id": party_id }))
            .await
            .unwrap();
        r["notifications"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == kind)
            .cloned()
            .collect()
    }

    /// The project's inbox now.
    pub async fn inbox(&self) -> Vec<Value> {
        crate::support::inbox(&self.person, &self.project).await
    }
}

/// The puppet's script: writes `$1` with the text `$2` and commits it (`$1 = -` writes
/// nothing), then completes at once or, with `$3 = wait`, once a message says "finish now". A
/// member started again in its checkout (a review to address, a conflict to resolve) adds a
/// line to its work.
pub fn puppet_script(dir: &Path) -> String {
    executable(
        dir,
        "scenario-puppet.sh",
        r#"#!/bin/sh
set -e
if [ "$1" != "-" ]; then
  printf '%s\n' "$2" > "$1"
  if echo "$TROUPE_PROMPT" | grep -q "again, in your checkout"; then printf 'reworked\n' >> "$1"; fi
  git add -A
  git -c user.name=member -c user.email=member@troupe commit -qm "$TROUPE_ROLE#$TROUPE_INSTANCE writes $1"
fi
if [ "$3" = wait ]; then
  heard=""
  until echo "$heard" | grep -q "finish now"; do
    heard="$heard $(troupe call poll_messages '{"wait_ms":2000}')"
  done
fi
troupe call complete "{\"output\":\"$TROUPE_ROLE done\"}" >/dev/null
"#,
    )
}
