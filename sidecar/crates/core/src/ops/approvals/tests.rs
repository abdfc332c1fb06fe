//! What a shell command reaches outside the checkout it runs in, and the path a request's rule
//! sees (a real directory: symlinks are followed).

use super::*;

/// A checkout in a temporary directory, with `src/` and a symlink `out` that leads outside.
fn checkout() -> (tempfile::TempDir, Place) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("wt");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(tmp.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), root.join("out")).unwrap();
    let real = root.canonicalize().unwrap();
    let place = Place {
        base: real.clone(),
        checkout: real.clone(),
        roots: [real, root],
    };
    (tmp, place)
}

#[test]
fn what_a_command_reaches_outside_the_checkout() {
    let (_tmp, place) = checkout();
    let cases: &[(&str, Option<&str>)] = &[
        ("rm -rf ~/important", Some("~/important")),
        ("rm -rf ~", Some("~")),
        ("rm -rf $HOME/important", Some("$HOME")),
        ("cat \"${HOME}\"/.netrc", Some("$HOME")),
        ("cat /etc/passwd", Some("/etc/passwd")),
        ("cargo build --target-dir=/tmp/t", Some("/tmp/t")),
        ("cat ../x", Some("../x")),
        ("cat src/../../x", Some("src/../../x")),
        ("cd ..", Some("..")),
        ("chmod -R 777 .*", Some(".*")),
        ("rm -rf {..,x}/y", Some("{..,x}/y")),
        ("cat out/secret", Some("out/secret")),
        ("echo hi > /tmp/x", Some("/tmp/x")),
        ("bash -c 'rm -rf ../x'", Some("../x")),
        ("sh -c 'rm -rf $HOME'", Some("$HOME")),
        // Inside, or harmless.
        ("cargo test --release", None),
        ("cat src/../Cargo.toml", None),
        ("cargo test 2>/dev/null", None),
        ("git log origin/main..HEAD", None),
        ("git diff HEAD~1", None),
        ("ls *.rs", None),
        ("rm -rf * .[a-z]*", None),
    ];
    for (command, want) in cases {
        let read = shell::Command::read(command).unwrap();
        assert_eq!(reaching(&read, &place).as_deref(), *want, "{command:?}");
    }
    // The checkout itself, named through its symlinked path, is inside.
    let named = place.roots[1].join("src/a.rs");
    let named = named.to_string_lossy();
    assert!(!word_escapes(&place, &named), "{named}");
}

#[test]
fn the_path_a_rule_sees_stays_in_the_checkout() {
    let (_tmp, place) = checkout();
    let inside = |p: &str| place.path_subject(p).is_some();
    assert!(inside("src/a.rs"));
    assert!(inside("src/../build.rs"));
    assert!(inside(&place.roots[1].join("src/a.rs").to_string_lossy()));
    // Out by `..`, by an absolute path, or through a symlink.
    assert!(!inside("../x"));
    assert!(!inside("/etc/passwd"));
    assert!(!inside("out/secret"));
}
