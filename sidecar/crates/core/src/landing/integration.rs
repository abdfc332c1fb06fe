//! A party's integration branch and its worktree (`<data>/landing/<party>`): where it lives,
//! whether a landing left one, and its removal (never with work someone did there).

use std::path::{Path, PathBuf};

use troupe_api::types::*;
use troupe_worktree::WorktreeError;
use troupe_worktree::land::{self as git_land, Strategy};

use crate::orchestrator::party_label;

pub(super) fn strategy(s: LandStrategy) -> Strategy {
    match s {
        LandStrategy::Merge => Strategy::Merge,
        LandStrategy::Rebase => Strategy::Rebase,
        LandStrategy::Squash => Strategy::Squash,
    }
}

/// A party's integration branch, its worktree's directory and the worktree's git name.
pub fn integration_of(
    layout: &troupe_api::layout::Layout,
    row: &troupe_store::PartyRow,
) -> (String, PathBuf, String) {
    let label = party_label(row);
    (
        format!("troupe/{label}/landing"),
        layout.data_dir.join("landing").join(&label),
        format!("troupe-{label}-landing"),
    )
}

/// Where the integration branch's last tip written by a landing is kept (beside its worktree).
pub(super) fn tip_marker(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(".{name}.tip"))
}

/// A party's integration worktree directory, if a landing left one (or its branch).
pub fn integration_left(
    layout: &troupe_api::layout::Layout,
    row: &troupe_store::PartyRow,
) -> Option<PathBuf> {
    let (_, dir, _) = integration_of(layout, row);
    (dir.exists() || tip_marker(&dir).exists()).then_some(dir)
}

/// Whether a party's integration worktree and branch may go, as `remove_integration_of` would
/// find it (nothing is changed).
pub fn check_integration_of(
    layout: &troupe_api::layout::Layout,
    row: &troupe_store::PartyRow,
) -> Result<(), WorktreeError> {
    let (branch, dir, _) = integration_of(layout, row);
    let expected = std::fs::read_to_string(tip_marker(&dir)).ok();
    git_land::check_integration(Path::new(&row.repo_root), &branch, expected.as_deref())
}

/// Removes a party's integration worktree and branch, unless someone worked there (then the
/// reason it was kept).
pub fn remove_integration_of(
    layout: &troupe_api::layout::Layout,
    row: &troupe_store::PartyRow,
) -> Result<(), WorktreeError> {
    let (branch, dir, wt_name) = integration_of(layout, row);
    let marker = tip_marker(&dir);
    let expected = std::fs::read_to_string(&marker).ok();
    let root = Path::new(&row.repo_root);
    git_land::check_integration(root, &branch, expected.as_deref())?;
    let _git = crate::project::git_lock();
    git_land::remove_integration(root, &dir, &wt_name, &branch)?;
    match std::fs::remove_file(&marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}
