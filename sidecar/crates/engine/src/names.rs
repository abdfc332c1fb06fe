//! The names Troupe puts in branch names and paths (agents, parties, roles, pools, playbooks).

/// Names we put in branch names and paths: no separators, no dots, nothing to escape.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
