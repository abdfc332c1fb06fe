//! Who is calling, and whether they may: the caller a credential makes (the person's token, or a
//! run's own credential minted here and refused once the run has ended), and the one check
//! every door's call goes through before its handler (`admit`, called by the registry): the
//! operation's declared [`Access`], with the params that name a caller bound to the credential's
//! session. It does not authenticate connections (the doors compare tokens) and holds no
//! operation logic.

use std::fmt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use hmac::{KeyInit, Mac};
use serde_json::Value;
use troupe_api::layout::Layout;
use troupe_api::{Access, ApiError, CallerKind};
use troupe_store::RunStatus;

use troupe_store::Store;

/// The prefix of a run's credential (`trn1.<run id>.<mac>`): it tells one from the person's
/// token at a glance.
const RUN_CREDENTIAL_PREFIX: &str = "trn1.";

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The person: the data dir's token, through `door` (`cli`, `lsp`, `acp`, `rpc`, …).
    Person { door: String },
    /// An agent CLI the person runs (`troupe mcp`, a hook): the person's token presented for an
    /// agent, which acts as the session it names (if any).
    Agent {
        session_id: Option<String>,
        door: String,
    },
    /// A run Troupe started, by its own credential (here, or on a remote worker through the hub).
    Member(Member),
}

/// A run's identity, as its credential gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub run_id: String,
    pub session_id: String,
    pub party_id: Option<String>,
    pub role: Option<String>,
    pub instance: Option<i64>,
    /// Through the NATS hub, from a remote worker.
    pub remote: bool,
}

impl Caller {
    /// The person, through a door.
    pub fn person(door: &str) -> Caller {
        Caller::Person { door: door.into() }
    }

    pub fn kind(&self) -> CallerKind {
        match self {
            Caller::Person { .. } => CallerKind::Person,
            Caller::Agent { .. } => CallerKind::Agent,
            Caller::Member(_) => CallerKind::Member,
        }
    }

    /// The session the caller acts as: none for the person (they may name any).
    pub fn session(&self) -> Option<&str> {
        match self {
            Caller::Person { .. } => None,
            Caller::Agent { session_id, .. } => session_id.as_deref(),
            Caller::Member(m) => Some(&m.session_id),
        }
    }

    /// A run's caller, from its row.
    pub fn member_of(run: &troupe_store::AgentRun, remote: bool) -> Caller {
        Caller::Member(Member {
            run_id: run.run_id.clone(),
            session_id: run.session_id.clone(),
            party_id: run.party_id.clone(),
            role: run.role_name.clone(),
            instance: run.instance_index,
            remote,
        })
    }

    /// A run's caller, from the narrow read its credential's calls make.
    pub fn member_from(run: troupe_store::RunCaller, remote: bool) -> Caller {
        Caller::Member(Member {
            run_id: run.run_id,
            session_id: run.session_id,
            party_id: run.party_id,
            role: run.role_name,
            instance: run.instance_index,
            remote,
        })
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Person { door } => write!(f, "the person (through {door})"),
            Caller::Agent {
                session_id: Some(s),
                door,
            } => write!(f, "an agent CLI as session {s} (through {door})"),
            Caller::Agent {
                session_id: None,
                door,
            } => write!(f, "an agent CLI without a session (through {door})"),
            Caller::Member(m) => {
                let where_ = if m.remote { "remote member" } else { "member" };
                match (&m.role, &m.party_id) {
                    (Some(role), Some(party)) => write!(
                        f,
                        "{where_} {role}#{} of party {party} (session {}, run {})",
                        m.instance.unwrap_or(0),
                        m.session_id,
                        m.run_id
                    ),
                    _ => write!(f, "{where_} run {} (session {})", m.run_id, m.session_id),
                }
            }
        }
    }
}

/// The key that signs runs' credentials: 256 random bits in the data dir (0600), made once, so
/// that a run adopted by a restarted daemon keeps its credential.
#[derive(Clone)]
pub struct RunKey([u8; 32]);

impl fmt::Debug for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunKey(..)")
    }
}

impl RunKey {
    /// Reads the data dir's key, or makes it.
    pub fn load_or_create(layout: &Layout) -> std::io::Result<RunKey> {
        let path = layout.data_dir.join("run.key");
        match std::fs::read(&path) {
            Ok(bytes) if bytes.len() == 32 => {
                let mut key = [0u8; 32];
                key.copy_from_slice(&bytes);
                return Ok(RunKey(key));
            }
            Ok(_) => {
                tracing::warn!(path = %path.display(), "the run key is malformed: making a new one (running members' credentials stop working)");
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut key = [0u8; 32];
        getrandom_fill(&mut key)?;
        write_private(&path, &key)?;
        Ok(RunKey(key))
    }

    /// A key for tests and throwaway daemons.
    pub fn random() -> std::io::Result<RunKey> {
        let mut key = [0u8; 32];
        getrandom_fill(&mut key)?;
        Ok(RunKey(key))
    }

    fn mac(&self, run_id: &str) -> String {
        // An HMAC key may be of any length: `new_from_slice` cannot fail for HMAC.
        let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0) else {
            return String::new();
        };
        mac.update(b"troupe run credential v1\0");
        mac.update(run_id.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The credential of a run: what its processes present instead of the person's token.
    pub fn mint(&self, run_id: &str) -> String {
        format!("{RUN_CREDENTIAL_PREFIX}{run_id}.{}", self.mac(run_id))
    }

    /// The run a credential was minted for, if it is one of ours.
    pub fn verify<'t>(&self, credential: &'t str) -> Option<&'t str> {
        let rest = credential.strip_prefix(RUN_CREDENTIAL_PREFIX)?;
        let (run_id, mac) = rest.rsplit_once('.')?;
        let expected = self.mac(run_id);
        (!expected.is_empty() && constant_time_eq(mac.as_bytes(), expected.as_bytes()))
            .then_some(run_id)
    }
}

fn getrandom_fill(key: &mut [u8]) -> std::io::Result<()> {
    getrandom::fill(key).map_err(|e| std::io::Error::other(format!("no random bytes: {e}")))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("key.tmp");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a run may still call: it has not ended.
fn live(status: RunStatus) -> bool {
    matches!(status, RunStatus::Pending | RunStatus::Running)
}

/// The member a run credential names, if it is valid and its run has not ended; otherwise why
/// it is refused.
pub fn identify_member(store: &Store, key: &RunKey, credential: &str) -> Result<Caller, String> {
    let Some(run_id) = key.verify(credential) else {
        return Err("wrong token".into());
    };
    let run = store
        .run_caller(run_id)
        .map_err(|_| format!("the credential's run {run_id} is unknown"))?;
    if !live(run.status) {
        return Err(format!(
            "the credential's run {run_id} has ended ({})",
            run.status.as_str()
        ));
    }
    Ok(Caller::member_from(run, false))
}

/// The refusal of a call: names the operation, the caller and who may call it.
fn refuse(op: &'static str, caller: &Caller, access: Access, why: Option<String>) -> ApiError {
    ApiError::Refused {
        op,
        caller: caller.to_string(),
        caller_kind: caller.kind(),
        allowed: access.who(),
        why,
    }
}

/// Checks a call against its operation's access and binds the params that name the caller to
/// the caller's session; the params to hand to the handler. Nothing has happened when it
/// refuses.
pub fn admit(
    store: &Store,
    caller: &Caller,
    op: &'static str,
    access: Access,
    params: Option<Value>,
) -> Result<Option<Value>, ApiError> {
    if let Caller::Person { door } = caller {
        return Ok(person_params(op, door, params));
    }
    if let Caller::Member(m) = caller {
        let run = store.run_caller(&m.run_id)?;
        if !live(run.status) {
            return Err(refuse(
                op,
                caller,
                access,
                Some(format!(
                    "its run has ended ({}): its credential no longer works",
                    run.status.as_str()
                )),
            ));
        }
    }
    let session = caller.session();
    match access {
        Access::Anyone => Ok(params),
        Access::Person => Err(refuse(op, caller, access, None)),
        Access::OwnAgent(_) if matches!(caller, Caller::Member(_)) => {
            Err(refuse(op, caller, access, None))
        }
        Access::OwnAgent(None) => Ok(params),
        Access::Caller(field) | Access::OwnAgent(Some(field)) => {
            bind(op, caller, access, session, field, params)
        }
        Access::SelfOrFound(_) if session.is_none() => Ok(params),
        Access::SelfOrFound(field) => bind(op, caller, access, session, field, params),
        Access::Leader => {
            let party_id = str_param(&params, "party_id");
            let Some(session) = session else {
                return Err(refuse(
                    op,
                    caller,
                    access,
                    Some("it names no session of its own".into()),
                ));
            };
            match party_id {
                Some(party) if is_leader(store, &party, session) => Ok(params),
                Some(party) => Err(refuse(
                    op,
                    caller,
                    access,
                    Some(format!("it does not lead party {party}")),
                )),
                // No party named: the handler refuses the params themselves.
                None => Ok(params),
            }
        }
        Access::RunParent => {
            let Some(run_id) = str_param(&params, "run_id") else {
                return Ok(params);
            };
            let Some(session) = session else {
                return Err(refuse(
                    op,
                    caller,
                    access,
                    Some("it names no session of its own".into()),
                ));
            };
            let run = store.get_run(&run_id)?;
            let parent = run.parent_session_id.as_deref() == Some(session);
            let leads = run
                .party_id
                .as_deref()
                .is_some_and(|p| is_leader(store, p, session));
            if parent || leads {
                Ok(params)
            } else {
                Err(refuse(
                    op,
                    caller,
                    access,
                    Some(format!(
                        "run {run_id} is neither its child nor in a party it leads"
                    )),
                ))
            }
        }
    }
}

/// The person's params: a decision records the door it was taken at.
fn person_params(op: &str, door: &str, params: Option<Value>) -> Option<Value> {
    match (op, params) {
        ("decide_approval", Some(Value::Object(mut p))) => {
            p.insert("decided_by".into(), Value::String(door.to_string()));
            Some(Value::Object(p))
        }
        (_, params) => params,
    }
}

fn str_param(params: &Option<Value>, field: &str) -> Option<String> {
    params.as_ref()?.get(field)?.as_str().map(str::to_string)
}

/// Fills the field naming the caller with its session, or refuses a different one.
fn bind(
    op: &'static str,
    caller: &Caller,
    access: Access,
    session: Option<&str>,
    field: &'static str,
    params: Option<Value>,
) -> Result<Option<Value>, ApiError> {
    let mut object = match params {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(o)) => o,
        // Not an object: the handler's parse refuses it with the reason.
        other => return Ok(other),
    };
    let named = object.get(field).filter(|v| !v.is_null());
    match (named, session) {
        (None, Some(s)) => {
            object.insert(field.into(), Value::String(s.to_string()));
        }
        (None, None) => {
            return Err(refuse(
                op,
                caller,
                access,
                Some(format!(
                    "without {field} it would act as the person; an agent names its own session"
                )),
            ));
        }
        (Some(v), Some(s)) if v.as_str() != Some(s) => {
            return Err(refuse(
                op,
                caller,
                access,
                Some(format!(
                    "its {field} names {v}, but its credential is session {s}'s"
                )),
            ));
        }
        // An agent CLI of the person's without a session names its own (not a boundary).
        (Some(_), _) => {}
    }
    Ok(Some(Value::Object(object)))
}

/// Whether `session` leads `party`: a member of its leading role, or the session that launched
/// it to lead it itself.
pub fn is_leader(store: &Store, party_id: &str, session: &str) -> bool {
    crate::party::PartyView::load(store, party_id).is_ok_and(|p| p.is_led_by(session))
}

#[cfg(test)]
mod tests;
