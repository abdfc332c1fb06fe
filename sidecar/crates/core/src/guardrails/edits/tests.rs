//! Changed lines counted from tool inputs of every shape: writes against the disk, edits,
//! multi-edits, ACP diffs and patches.

use serde_json::json;

use super::*;

fn lines(n: usize, word: &str) -> String {
    (0..n).map(|i| format!("{word} {i}\n")).collect()
}

#[test]
fn a_line_diff_counts_removed_and_added_lines() {
    assert_eq!(lines_changed("a\nb\nc\n", "a\nb\nc\n"), 0);
    assert_eq!(lines_changed("a\nb\nc\n", "a\nB\nc\n"), 2);
    assert_eq!(lines_changed("", "a\nb\n"), 2);
    assert_eq!(lines_changed("a\nb\n", ""), 2);
    // Two far apart edits of a long file count as two lines each, not the lines between.
    let before = lines(1000, "line");
    let after = format!("top\n{before}bottom\n");
    assert_eq!(lines_changed(&before, &after), 2);
}

#[test]
fn every_input_shape() {
    let disk = lines(100, "old");
    let on_disk = |p: &str| (p == "/wt/big.rs").then(|| disk.clone());
    let none = |_: &str| None;
    let new_file = lines(500, "new");
    let cases: Vec<(&str, Value, usize)> = vec![
        // A write (Claude Code's `Write`, the executor's `write_file`) against the disk.
        (
            "write over a file",
            json!({ "file_path": "/wt/big.rs", "content": format!("{disk}one more\n") }),
            1,
        ),
        (
            "write of a new file",
            json!({ "path": "new.rs", "content": new_file }),
            500,
        ),
        (
            "write replacing a file",
            json!({ "file_path": "/wt/big.rs", "content": "" }),
            100,
        ),
        // `content` without a path is not a file (a message, say).
        ("no path", json!({ "content": new_file }), 0),
        // Edits.
        (
            "edit",
            json!({ "file_path": "/wt/big.rs", "old_string": "old 1\nold 2\n", "new_string": "x\n" }),
            3,
        ),
        (
            "edit everywhere",
            json!({ "file_path": "/wt/big.rs", "old_string": "old", "new_string": "new", "replace_all": true }),
            200,
        ),
        (
            "multi-edit",
            json!({ "file_path": "/wt/big.rs", "edits": [
                { "old_string": "old 1", "new_string": "a" },
                { "old_string": "old 2\nold 3", "new_string": "b" },
            ] }),
            5,
        ),
        // ACP diffs (as the ACP runner adds them, or as tool call content).
        (
            "ACP diffs",
            json!({ "diffs": [
                { "type": "diff", "path": "/wt/a.rs", "oldText": "a\n", "newText": "b\n" },
                { "type": "diff", "path": "/wt/n.rs", "oldText": null, "newText": new_file },
            ] }),
            502,
        ),
        (
            "ACP content",
            json!({ "content": [
                { "type": "content", "content": { "type": "text", "text": "hi" } },
                { "type": "diff", "path": "/wt/n.rs", "newText": "a\nb\n" },
            ] }),
            2,
        ),
        // A patch as text; the larger of two shapes, not their sum.
        ("patch", json!({ "patch": "--- a\n+++ b\n-x\n+y\n z\n" }), 2),
        (
            "edit and its diff",
            json!({ "old_string": "a", "new_string": "b", "diff": "-a\n+b\n" }),
            2,
        ),
        ("nothing", json!({ "command": "cargo test" }), 0),
    ];
    for (what, input, want) in cases {
        assert_eq!(
            changed_lines(&input, None, &on_disk),
            want,
            "{what}: {input}"
        );
    }
    // With nothing on disk, an edit everywhere counts once.
    let input = json!({ "file_path": "/wt/big.rs", "old_string": "old", "new_string": "new", "replace_all": true });
    assert_eq!(changed_lines(&input, None, &none), 2);
    // The request's own path names the file when the input does not.
    let input = json!({ "content": format!("{disk}more\n") });
    assert_eq!(changed_lines(&input, Some("/wt/big.rs"), &on_disk), 1);
    assert_eq!(changed_lines(&input, None, &on_disk), 0);
}
