//! A push's credential file and git's reading of it.
use super::*;

#[test]
fn git_reads_the_credential_from_its_file_which_lives_for_the_push_alone() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("forge");
    let c = PushCredential {
        username: "x-access-token",
        password: "ghp_secret",
        scratch: &scratch,
    };
    let file = credential_file(&c).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file.0).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut git = Command::new("git")
        .args(helper_args(&file.0))
        .args(["credential", "fill"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    git.stdin
        .take()
        .unwrap()
        .write_all(b"protocol=https\nhost=github.com\n\n")
        .unwrap();
    let out = git.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("password=ghp_secret"), "{text}");
    assert!(text.contains("username=x-access-token"), "{text}");
    let path = file.0.clone();
    drop(file);
    assert!(!path.exists(), "the file goes with the push");
}
