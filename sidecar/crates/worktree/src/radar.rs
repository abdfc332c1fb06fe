//! The conflict radar: an in-memory three-way merge of every pair of live member branches, and of
//! each with the target, while they work (git2 merge trees; no checkout is touched). A conflict
//! names the two sides, the files, and the lines of each file at the fork point that both sides
//! changed. Results are remembered per pair of tips, so a scan where nothing moved merges nothing.

use std::collections::HashMap;
use std::path::Path;

use git2::{Oid, Repository};

use crate::WorktreeError;
use crate::review::{target_branch, target_tip, tip};

/// Lines (1-based, inclusive) of a file at the fork point that both sides changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictRange {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
}

/// Two sides that would conflict: two members' branches, or a member's branch and the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PredictedConflict {
    /// The labels given to the scan (the target's label is the target branch's name).
    pub a: String,
    pub b: String,
    pub files: Vec<String>,
    pub ranges: Vec<ConflictRange>,
}

/// The conflicting files of one pair, each with its line ranges.
type PairConflicts = Vec<(String, Vec<ConflictRange>)>;

/// One radar per repository; it remembers the result for each pair of tips it has merged.
#[derive(Debug, Default)]
pub struct Radar {
    cache: HashMap<(Oid, Oid), PairConflicts>,
    /// Merges done since the radar was made (a cache hit does none).
    pub merges: u64,
}

/// Old-side line ranges (start, end inclusive) that the diff from `ancestor` to `side` changes.
fn changed_ranges(
    repo: &Repository,
    ancestor: Option<Oid>,
    side: Option<Oid>,
) -> Result<Vec<(u32, u32)>, WorktreeError> {
    let (Some(ancestor), Some(side)) = (ancestor, side) else {
        return Ok(vec![(1, 1)]);
    };
    let old = repo.find_blob(ancestor)?;
    let new = repo.find_blob(side)?;
    let mut ranges = Vec::new();
    let mut opts = git2::DiffOptions::new();
    opts.context_lines(0);
    repo.diff_blobs(
        Some(&old),
        None,
        Some(&new),
        None,
        Some(&mut opts),
        None,
        None,
        Some(&mut |_, hunk| {
            let start = hunk.old_start().max(1);
            let end = start + hunk.old_lines().max(1) - 1;
            ranges.push((start, end));
            true
        }),
        None,
    )?;
    Ok(ranges)
}

impl Radar {
    pub fn new() -> Self {
        Self::default()
    }

    /// The conflicting files (with ranges) of merging the commits `a` and `b`.
    fn pair(&mut self, repo: &Repository, a: Oid, b: Oid) -> Result<PairConflicts, WorktreeError> {
        let key = if a < b { (a, b) } else { (b, a) };
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit.clone());
        }
        let mut out = Vec::new();
        if a != b && !repo.graph_descendant_of(a, b)? && !repo.graph_descendant_of(b, a)? {
            self.merges += 1;
            let base = repo.merge_base(a, b)?;
            let tree = |id: Oid| repo.find_commit(id).and_then(|c| c.tree());
            let index = repo.merge_trees(&tree(base)?, &tree(a)?, &tree(b)?, None)?;
            if index.has_conflicts() {
                for conflict in index.conflicts()? {
                    let conflict = conflict?;
                    let Some(entry) = conflict
                        .ancestor
                        .as_ref()
                        .or(conflict.our.as_ref())
                        .or(conflict.their.as_ref())
                    else {
                        continue;
                    };
                    let path = String::from_utf8_lossy(&entry.path).into_owned();
                    let ancestor = conflict.ancestor.as_ref().map(|e| e.id);
                    let ours = changed_ranges(repo, ancestor, conflict.our.as_ref().map(|e| e.id))?;
                    let theirs =
                        changed_ranges(repo, ancestor, conflict.their.as_ref().map(|e| e.id))?;
                    let mut ranges: Vec<ConflictRange> = Vec::new();
                    for &(s1, e1) in &ours {
                        for &(s2, e2) in &theirs {
                            // Touching or overlapping ranges conflict (git merges neither).
                            if s1 <= e2 + 1 && s2 <= e1 + 1 {
                                ranges.push(ConflictRange {
                                    path: path.clone(),
                                    start_line: s1.min(s2),
                                    end_line: e1.max(e2),
                                });
                            }
                        }
                    }
                    if ranges.is_empty() {
                        ranges.push(ConflictRange {
                            path: path.clone(),
                            start_line: 1,
                            end_line: 1,
                        });
                    }
                    ranges.dedup();
                    out.push((path, ranges));
                }
            }
        }
        self.cache.insert(key, out.clone());
        Ok(out)
    }

    /// Every pair of `branches` (label, branch name), and each branch with `target`, merged in
    /// memory; the pairs that would conflict. Branches that do not exist (yet) are skipped.
    pub fn scan(
        &mut self,
        repo_root: &Path,
        target: Option<&str>,
        branches: &[(String, String)],
    ) -> Result<Vec<PredictedConflict>, WorktreeError> {
        let repo = Repository::open(repo_root)?;
        let target = target_branch(&repo, target)?;
        let target_head = target_tip(&repo, &target)?;
        let tips: Vec<(&str, Oid)> = branches
            .iter()
            .filter_map(|(label, branch)| tip(&repo, branch).ok().map(|t| (label.as_str(), t)))
            .collect();
        let mut found = Vec::new();
        let mut record = |a: &str, b: &str, hits: PairConflicts| {
            if !hits.is_empty() {
                found.push(PredictedConflict {
                    a: a.to_string(),
                    b: b.to_string(),
                    files: hits.iter().map(|(p, _)| p.clone()).collect(),
                    ranges: hits.into_iter().flat_map(|(_, r)| r).collect(),
                });
            }
        };
        for (i, &(la, ta)) in tips.iter().enumerate() {
            for &(lb, tb) in &tips[i + 1..] {
                record(la, lb, self.pair(&repo, ta, tb)?);
            }
            record(la, &target, self.pair(&repo, ta, target_head)?);
        }
        // Forget pairs no longer asked about, so the cache stays the size of one scan.
        let live: std::collections::HashSet<Oid> =
            tips.iter().map(|(_, t)| *t).chain([target_head]).collect();
        self.cache
            .retain(|(a, b), _| live.contains(a) && live.contains(b));
        Ok(found)
    }
}
