//! The store's typed error: callers branch on `NotFound`, `Forbidden`, `Conflict` and
//! `Invalid`; everything else is a storage failure.

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A row the caller named does not exist.
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    /// The caller may not do this to that row (for example, a session of another project).
    #[error("{0}")]
    Forbidden(String),
    /// The row is in a state that does not allow this (for example, an ended session).
    #[error("{0}")]
    Conflict(String),
    /// The request is well-formed but makes no sense (for example, no parent to send to).
    #[error("{0}")]
    Invalid(String),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database migration failed: {0}")]
    Migration(#[from] rusqlite_migration::Error),
    #[error("stored JSON is unreadable: {0}")]
    Json(#[from] serde_json::Error),
    /// The group commit holding this write failed, so the write did not happen.
    #[error("commit failed: {0}")]
    Commit(String),
    /// The writer thread has stopped (the daemon is shutting down).
    #[error("the store is closed")]
    Closed,
    #[error("cannot start the store's writer thread: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    pub(crate) fn not_found(what: &'static str, id: &str) -> Self {
        StoreError::NotFound {
            what,
            id: id.to_string(),
        }
    }
}
