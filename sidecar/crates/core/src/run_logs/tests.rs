//! A rotated log reads on: offsets keep their bytes across a rotation, a reader left behind (or
//! past the end) starts at the oldest byte kept and is told, the previous part holds the last
//! bytes before the rotation, a character cut at a part's end is not waited for.

use std::io::Write as _;

use super::{files, read_at, rotate};

fn append(path: &std::path::Path, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

#[test]
fn offsets_survive_a_rotation_and_a_reader_left_behind_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("r.log");
    // Not written yet: empty.
    let empty = read_at(&log, Some(5), 10).unwrap();
    assert_eq!((empty.text.as_str(), empty.next, empty.size), ("", 5, 0));
    append(&log, "0123456789abcdefghij");
    assert!(!rotate(&log, 100).unwrap(), "under the limit: left alone");
    assert!(rotate(&log, 8).unwrap());
    // The previous part keeps the last 8 bytes; the log starts again at 20.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("r.log.1")).unwrap(),
        "cdefghij"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "");
    append(&log, "KLMN");
    let whole = read_at(&log, Some(12), 100).unwrap();
    assert_eq!(
        (
            whole.text.as_str(),
            whole.offset,
            whole.next,
            whole.size,
            whole.rotated
        ),
        ("cdefghijKLMN", 12, 24, 24, false),
        "a read goes on from the previous part into the current one"
    );
    let rest = read_at(&log, Some(20), 100).unwrap();
    assert_eq!((rest.text.as_str(), rest.next), ("KLMN", 24));
    // Gone: from the oldest byte kept, told.
    let behind = read_at(&log, Some(3), 4).unwrap();
    assert_eq!(
        (behind.text.as_str(), behind.offset, behind.rotated),
        ("cdef", 12, true)
    );
    // Past the end: the current part's start, told.
    let past = read_at(&log, Some(1000), 100).unwrap();
    assert_eq!(
        (past.text.as_str(), past.offset, past.rotated),
        ("KLMN", 20, true)
    );
    // The tail, as without an offset.
    let tail = read_at(&log, None, 6).unwrap();
    assert_eq!(
        (tail.text.as_str(), tail.offset, tail.rotated),
        ("ijKLMN", 18, false)
    );
    // The followers' read: text, next, size.
    let r = read_at(&log, Some(22), 100).unwrap();
    assert_eq!((r.text.as_str(), r.next, r.size), ("MN", 24, 24));
    // A second rotation replaces the previous part.
    append(&log, "opqrstuvwxyz");
    assert!(rotate(&log, 8).unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("r.log.1")).unwrap(),
        "stuvwxyz"
    );
    let again = read_at(&log, Some(30), 100).unwrap();
    assert_eq!(
        (again.text.as_str(), again.offset, again.size),
        ("uvwxyz", 30, 36)
    );
    let gone = read_at(&log, Some(20), 3).unwrap();
    assert_eq!(
        (gone.text.as_str(), gone.offset, gone.rotated),
        ("stu", 28, true)
    );
    // Every file of it, then none.
    let (count, bytes) = files(&log, false).unwrap();
    assert_eq!(count, 3, "the log, its previous part and where it starts");
    assert_eq!(bytes, 8 + 2);
    assert_eq!(files(&log, true).unwrap(), (count, bytes));
    assert_eq!(files(&log, false).unwrap(), (0, 0));
}

#[test]
fn a_character_a_rotation_cut_is_replaced_and_one_the_limit_cut_is_read_next() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("r.log");
    // The previous part ends inside a `ü` (2 bytes) whose second byte was lost.
    std::fs::write(&log, &"abcü".as_bytes()[..4]).unwrap();
    assert!(rotate(&log, 3).unwrap());
    append(&log, "xy");
    let r = read_at(&log, Some(1), 100).unwrap();
    assert_eq!((r.text.as_str(), r.next), ("bc\u{fffd}xy", 6));
    // A character the limit cuts is read next time.
    append(&log, "ü");
    let cut = read_at(&log, Some(4), 3).unwrap();
    assert_eq!((cut.text.as_str(), cut.next), ("xy", 6));
}
