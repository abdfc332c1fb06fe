//! Wake-ups for waiting readers: per session, the highest message `seq` committed for it; per
//! request (`approval:<id>`, a question's id), that it was answered. The pending approvals,
//! the notifications and the inbox are not here: their feeds wait on the store's change
//! topics (`troupe_store::Topic`), which the store bumps when a commit changed them.
//! Long-polls and subscriptions wait here, then read the messages themselves from the store,
//! so a missed or coalesced wake-up can never lose or reorder a message.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

#[derive(Debug, Default)]
pub struct Hub {
    sessions: Mutex<HashMap<String, watch::Sender<i64>>>,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<i64>>> {
        // The map stays consistent even if a holder panicked.
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A receiver that changes whenever a message for `session_id` commits. Subscribe before
    /// reading so nothing committed in between is missed.
    pub fn watch(&self, session_id: &str) -> watch::Receiver<i64> {
        self.lock()
            .entry(session_id.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Announces that messages up to `seq` for `session_id` are committed.
    pub fn publish(&self, session_id: &str, seq: i64) {
        let map = self.lock();
        if let Some(tx) = map.get(session_id) {
            tx.send_if_modified(|latest| {
                if seq > *latest {
                    *latest = seq;
                    true
                } else {
                    false
                }
            });
        }
    }

    /// Forgets a key nobody waits on (an ended session, a decided request).
    pub fn forget(&self, session_id: &str) {
        let mut map = self.lock();
        if map
            .get(session_id)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            map.remove(session_id);
        }
    }
}

/// The hub key a permission request's decision is announced on.
pub fn wake_key(approval_id: &str) -> String {
    format!("approval:{approval_id}")
}

/// Wakes whoever waits on requests that just expired (their run ended). The subscribers of the
/// pending list hear it from the store (`Topic::Approvals`).
pub fn announce_expired(hub: &Hub, approval_ids: &[String]) {
    for id in approval_ids {
        hub.publish(&wake_key(id), 1);
    }
}
