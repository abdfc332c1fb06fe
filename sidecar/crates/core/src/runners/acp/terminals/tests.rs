//! Terminals: exit, environment, cwd, newest-bytes truncation, kill, release.
use super::*;

fn spec(script: &str, limit: Option<u64>) -> TerminalSpec {
    TerminalSpec {
        command: "sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("GREETING".into(), "hi".into())],
        cwd: None,
        output_byte_limit: limit,
    }
}

#[tokio::test]
async fn runs_waits_and_keeps_the_newest_output() {
    let dir = tempfile::tempdir().unwrap();
    let t = Terminals::default();
    let id = t
        .create(spec("echo $GREETING; pwd; exit 3", None), dir.path())
        .unwrap();
    let exit = t.wait(&id).await.unwrap();
    assert_eq!(exit.code, Some(3));
    let out = t.output(&id).unwrap();
    let real = dir.path().canonicalize().unwrap();
    assert_eq!(out.output, format!("hi\n{}\n", real.display()));
    assert!(!out.truncated);

    // Past the limit the oldest bytes go first.
    let id = t
        .create(spec("printf 'aaaabbbbcccc'", Some(6)), dir.path())
        .unwrap();
    t.wait(&id).await.unwrap();
    let out = t.output(&id).unwrap();
    assert_eq!((out.output.as_str(), out.truncated), ("bbcccc", true));
}

#[tokio::test]
async fn kill_release_and_unknown_ids() {
    let dir = tempfile::tempdir().unwrap();
    let t = Terminals::default();
    let id = t.create(spec("sleep 30", None), dir.path()).unwrap();
    assert_eq!(t.running(), 1);
    t.kill(&id).unwrap();
    let exit = t.wait(&id).await.unwrap();
    assert_eq!(exit.signal.as_deref(), Some("SIGKILL"));
    t.release(&id).unwrap();
    assert!(t.output(&id).unwrap_err().contains("no terminal"));
    assert!(t.wait("term-99").await.is_err());
    let id = t.create(spec("sleep 30", None), dir.path()).unwrap();
    let exit = t.wait(&id);
    t.kill_all();
    assert!(t.output(&id).is_err());
    // Killed, not only forgotten.
    let exit = tokio::time::timeout(std::time::Duration::from_secs(5), exit)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.signal.as_deref(), Some("SIGKILL"));
}
