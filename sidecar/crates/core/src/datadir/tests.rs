//! The data dir watch's own tests: a lock file's identity.

use super::*;

#[test]
fn a_lock_file_deleted_or_replaced_is_noticed() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("data/troupe.lock");
    std::fs::create_dir(tmp.path().join("data")).unwrap();
    std::fs::write(&lock, "1\n").unwrap();
    let ours = identity(&lock).unwrap();
    assert_eq!(check(&lock, ours), None);
    // Another file in its place (written beside, renamed over it).
    let other = tmp.path().join("data/other");
    std::fs::write(&other, "2\n").unwrap();
    std::fs::rename(&other, &lock).unwrap();
    assert_eq!(check(&lock, ours), Some(Lost::Replaced));
    std::fs::remove_dir_all(tmp.path().join("data")).unwrap();
    assert_eq!(check(&lock, ours), Some(Lost::Gone));
}
