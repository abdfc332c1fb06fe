//! The adapter's memory of people's permissions: GitHub's answer for a (repository, login)
//! kept for a while ([`TTL`]), so that asking for every comment's author does not cost a
//! request each time. Bounded in entries; when full, the expired entries go first, then the
//! oldest.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::Permission;

/// How long an answer is trusted.
pub(crate) const TTL: Duration = Duration::from_secs(10 * 60);
/// At most this many answers are kept.
pub(crate) const MAX_ENTRIES: usize = 512;

/// (`owner/name`, login), both lowercased: GitHub's names are case-insensitive.
type Key = (String, String);

/// Permissions by repository and login, each until it expires.
pub(crate) struct Permissions {
    ttl: Duration,
    max_entries: usize,
    inner: Mutex<HashMap<Key, (Instant, Permission)>>,
}

fn key(repo: &str, login: &str) -> Key {
    (repo.to_lowercase(), login.to_lowercase())
}

impl Permissions {
    pub(crate) fn new(ttl: Duration, max_entries: usize) -> Permissions {
        Permissions {
            ttl,
            max_entries,
            inner: Mutex::new(HashMap::new()),
        }
    }

    fn inner(&self) -> MutexGuard<'_, HashMap<Key, (Instant, Permission)>> {
        // Nothing is left half-done under the lock: a panic elsewhere leaves it usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The permission remembered for `login` in `repo` (`owner/name`), if still fresh at `now`.
    pub(crate) fn get(&self, repo: &str, login: &str, now: Instant) -> Option<Permission> {
        let mut inner = self.inner();
        let key = key(repo, login);
        let (at, permission) = *inner.get(&key)?;
        if now.saturating_duration_since(at) >= self.ttl {
            inner.remove(&key);
            return None;
        }
        Some(permission)
    }

    /// Remembers `permission` for `login` in `repo`, learned at `now`.
    pub(crate) fn put(&self, repo: &str, login: &str, permission: Permission, now: Instant) {
        if self.max_entries == 0 {
            return;
        }
        let mut inner = self.inner();
        let key = key(repo, login);
        if !inner.contains_key(&key) && inner.len() >= self.max_entries {
            let ttl = self.ttl;
            inner.retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
            while inner.len() >= self.max_entries {
                let Some(oldest) = inner
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                inner.remove(&oldest);
            }
        }
        inner.insert(key, (now, permission));
    }

    /// How many answers it holds (fresh or not yet swept).
    pub(crate) fn len(&self) -> usize {
        self.inner().len()
    }
}
