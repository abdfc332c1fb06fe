//! The adapter's memory of GitHub's answers to the watcher's reads, so that reading the same
//! thing again is a conditional request: per address (the path and query below the API's base;
//! the credential is in a header, never in it) the last successful answer's validator (`ETag`),
//! body and next page. A read with an entry sends `If-None-Match`; GitHub's `304 Not Modified`
//! (which it does not count against the rate limit) is then answered from the entry.
//!
//! Bounded in entries and in bytes; the least recently used entries go first. An entry is
//! always one answer whole (its validator, body and next page together), so whatever is
//! evicted or replaced meanwhile, a 304 is answered with the body its validator names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// At most this many answers are kept.
pub(crate) const MAX_ENTRIES: usize = 256;
/// At most this many bytes of addresses, validators and bodies are kept; a bigger answer is not.
pub(crate) const MAX_BYTES: usize = 32 * 1024 * 1024;

/// One remembered answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cached {
    /// Its `ETag`, sent back as `If-None-Match`.
    pub(crate) etag: String,
    pub(crate) body: Arc<str>,
    /// Its `Link: rel="next"` address, as GitHub gave it (a 304 need not repeat the header).
    pub(crate) next: Option<String>,
}

impl Cached {
    fn bytes(&self, key: &str) -> usize {
        key.len() + self.etag.len() + self.body.len() + self.next.as_ref().map_or(0, String::len)
    }
}

struct Slot {
    cached: Cached,
    /// When it was last put or looked up (a tick of [`Inner::clock`]).
    used: u64,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<String, Slot>,
    bytes: usize,
    clock: u64,
}

/// Answers by address, least recently used evicted first.
pub(crate) struct Cache {
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

impl Cache {
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Cache {
        Cache {
            max_entries,
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Nothing is left half-done under the lock: a panic elsewhere leaves it usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The answer remembered for `key`, now the most recently used.
    pub(crate) fn get(&self, key: &str) -> Option<Cached> {
        let mut inner = self.inner();
        inner.clock += 1;
        let now = inner.clock;
        let slot = inner.slots.get_mut(key)?;
        slot.used = now;
        Some(slot.cached.clone())
    }

    /// Remembers `cached` for `key` (replacing what was), evicting the least recently used
    /// entries until both bounds hold; an answer bigger than the byte bound is not kept.
    pub(crate) fn put(&self, key: &str, cached: Cached) {
        let size = cached.bytes(key);
        let mut inner = self.inner();
        Self::take(&mut inner, key);
        if size > self.max_bytes || self.max_entries == 0 {
            return;
        }
        inner.clock += 1;
        let used = inner.clock;
        inner.bytes += size;
        inner.slots.insert(key.to_string(), Slot { cached, used });
        while inner.slots.len() > self.max_entries || inner.bytes > self.max_bytes {
            let Some(oldest) = inner
                .slots
                .iter()
                .filter(|(k, _)| k.as_str() != key)
                .min_by_key(|(_, slot)| slot.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            Self::take(&mut inner, &oldest);
        }
    }

    /// Forgets `key`.
    pub(crate) fn remove(&self, key: &str) {
        Self::take(&mut self.inner(), key);
    }

    fn take(inner: &mut Inner, key: &str) {
        if let Some(slot) = inner.slots.remove(key) {
            inner.bytes = inner.bytes.saturating_sub(slot.cached.bytes(key));
        }
    }

    /// How many answers it holds.
    pub(crate) fn len(&self) -> usize {
        self.inner().slots.len()
    }

    /// How many bytes they take (addresses, validators, bodies and next pages).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.inner().bytes
    }
}
