//! Unit tests of the executor tools: path confinement, capped reads, capped and killed
//! commands.

use super::*;
use crate::sandbox::Sandbox;

#[test]
fn confine_keeps_paths_inside_the_working_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("out-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("nope.txt"), root.join("dangling")).unwrap();
    std::os::unix::fs::symlink(root.join("src"), root.join("inside-link")).unwrap();
    let real = root.canonicalize().unwrap();

    assert_eq!(confine(&root, "src/a.rs").unwrap(), real.join("src/a.rs"));
    assert_eq!(
        confine(&root, "./new/b.txt").unwrap(),
        real.join("new/b.txt")
    );
    assert_eq!(confine(&root, "").unwrap(), real);
    assert!(confine(&root, "inside-link/c.rs").is_ok());
    let abs = real.join("src/d.rs");
    assert_eq!(confine(&root, abs.to_str().unwrap()).unwrap(), abs);
    for escape in [
        "../outside/x",
        "src/../../x",
        "/etc/passwd",
        "out-dir/x",
        "dangling",
    ] {
        let err = confine(&root, escape).unwrap_err();
        assert!(
            err.contains("outside the working directory"),
            "{escape}: {err}"
        );
    }
}

#[test]
fn reads_are_capped_and_regular_files_only() {
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big.txt");
    std::fs::write(&big, "é".repeat(MAX_TOOL_OUTPUT)).unwrap();
    let text = read_capped(&big, "big.txt").unwrap();
    assert!(text.len() <= MAX_TOOL_OUTPUT + 40);
    assert!(text.ends_with("[output truncated]"));
    let err = read_capped(tmp.path(), "dir").unwrap_err();
    assert_eq!(err, "dir is not a regular file");
}

#[tokio::test]
async fn commands_are_capped_and_killed_on_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_command(
        tmp.path(),
        "yes | head -c 1000000; echo done >&2",
        None,
        "run-1",
        &Sandbox::off("a test"),
    )
    .await
    .unwrap();
    assert!(out.starts_with("exit status 0\n"), "{}", &out[..40]);
    assert!(out.len() <= MAX_TOOL_OUTPUT + 40, "{}", out.len());
    let err = run_command(
        tmp.path(),
        "sleep 30 & sleep 30",
        Some(0.2),
        "run-1",
        &Sandbox::off("a test"),
    )
    .await
    .unwrap_err();
    assert_eq!(err, "the command ran past 0.2 s and was killed");
    // The executor's command carries its run's marker (a daemon started after a kill -9 ends
    // what it left).
    let out = run_command(
        tmp.path(),
        "echo \"$TROUPE_RUN_ID\"",
        None,
        "run-1",
        &Sandbox::off("a test"),
    )
    .await
    .unwrap();
    assert!(out.ends_with("run-1\n"), "{out}");
}

/// An executor's shell command runs in the member sandbox: it works in its checkout but sees
/// neither the person's token nor the database. (Where bubblewrap cannot run, the daemon runs
/// members unsandboxed and says so; `scripts/test` installs it.)
#[tokio::test]
async fn commands_run_in_the_member_sandbox() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = troupe_api::layout::Layout {
        data_dir: tmp.path().join("data"),
        runtime_dir: tmp.path().join("run"),
    };
    layout.prepare_dirs().unwrap();
    std::fs::write(layout.data_dir.join("token"), "the-persons-secret").unwrap();
    let sandbox = Sandbox::detect(&layout);
    if !sandbox.is_on() {
        eprintln!("skipped: {}", sandbox.status());
        return;
    }
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let token = layout.data_dir.join("token");
    let out = run_command(
        &work,
        &format!(
            "echo made > made.txt; cat made.txt; cat {}",
            token.display()
        ),
        None,
        "run-1",
        &sandbox,
    )
    .await
    .unwrap();
    assert!(out.contains("made"), "{out}");
    assert!(!out.contains("the-persons-secret"), "{out}");
    assert!(!out.starts_with("exit status 0"), "{out}");
    assert_eq!(
        std::fs::read_to_string(work.join("made.txt")).unwrap(),
        "made\n"
    );
}
