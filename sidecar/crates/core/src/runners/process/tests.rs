//! Tests of the process runner's spawning: a session of its own without a fork, the program
//! found as `execvp` would, a missing one refused at once.

use std::time::Duration;

use tokio::sync::mpsc;

use super::{Exit, RunTable, SpawnSpec, find_program};

fn spec(dir: &std::path::Path, argv: &[&str]) -> SpawnSpec {
    SpawnSpec {
        run_id: "r1".into(),
        log: "r1".into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: dir.to_path_buf(),
        env: Vec::new(),
        timeout: None,
        pid_namespace: false,
    }
}

#[test]
fn a_program_is_found_as_execvp_would_in_the_path_the_process_gets() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let tool = bin.join("my-tool");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    let env = |path: &str| vec![("PATH".to_string(), path.to_string())];
    let here = dir.path();
    // Not executable yet: not found in the PATH, refused by its path.
    assert!(find_program("my-tool", here, &env(bin.to_str().unwrap())).is_err());
    let by_path = find_program("./bin/my-tool", here, &[]).unwrap_err();
    assert_eq!(by_path.kind(), std::io::ErrorKind::PermissionDenied);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("/nowhere:{}", bin.display());
    assert_eq!(find_program("my-tool", here, &env(&path)).unwrap(), tool);
    // A path is taken as it is, relative to the process's directory.
    assert_eq!(
        find_program("./bin/my-tool", here, &[]).unwrap(),
        std::path::PathBuf::from("./bin/my-tool")
    );
    let missing = find_program("./x/y", here, &[]).unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
}

#[tokio::test]
async fn a_missing_program_is_refused_at_the_start_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (exits, _rx) = mpsc::unbounded_channel();
    let table = RunTable::new(dir.path().join("runs"), exits);
    let e = table
        .spawn(spec(dir.path(), &["troupe-no-such-program", "x"]))
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("troupe-no-such-program"), "{e}");
}

#[tokio::test]
async fn a_process_leads_a_session_of_its_own_and_is_reported_when_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let (exits, mut rx) = mpsc::unbounded_channel();
    let table = RunTable::new(dir.path().join("runs"), exits);
    // It says its group and session, then waits to be told to go.
    let script = "cut -d' ' -f5,6 /proc/$$/stat > ids.tmp && mv ids.tmp ids; \
                  while [ ! -e go ]; do sleep 0.01; done; exit 3";
    let (pid, start) = table
        .spawn(spec(dir.path(), &["sh", "-c", script]))
        .unwrap();
    assert!(start.is_some());
    let ids = dir.path().join("ids");
    let mut text = String::new();
    for _ in 0..6000 {
        text = std::fs::read_to_string(&ids).unwrap_or_default();
        if !text.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ids: Vec<u32> = text
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(ids, vec![pid, pid], "group and session are its own pid");
    std::fs::write(dir.path().join("go"), "").unwrap();
    let exit = rx.recv().await.unwrap();
    assert_eq!(exit.run_id, "r1");
    assert!(
        matches!(
            exit.exit,
            Exit::Exited {
                code: Some(3),
                signal: None
            }
        ),
        "{:?}",
        exit.exit
    );
}

#[test]
fn a_start_time_is_the_stat_lines_22nd_field_even_when_the_name_has_spaces_and_parens() {
    // A name with a space and a `)` in it: the fields are counted after the last `)`.
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("odd) name");
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let mut child = std::process::Command::new(&exe).arg("30").spawn().unwrap();
    let pid = child.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    assert!(stat.contains("(odd) name)"), "{stat}");
    let expected: i64 = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let start = super::process_start_time(pid);
    assert_eq!(start, Some(expected));
    assert!(super::is_alive(pid, start));
    assert!(
        !super::is_alive(pid, Some(expected + 1)),
        "another start is another process"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!super::is_alive(pid, start), "a reaped process is gone");
    assert_eq!(super::process_start_time(pid), None);
}
