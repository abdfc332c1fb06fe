//! The Landlock sandbox on the running kernel: each test restricts a thread of its own (Landlock
//! restricts the calling thread, and what it starts inherits it), then tries what the policy
//! allows and forbids, in that thread and in a shell it starts. A kernel without Landlock fails
//! them, unless TROUPE_TEST_NO_LANDLOCK=1 says it may be missing.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::symlink;
use std::process::{Command, Output};

use super::*;

/// The kernel's ABI, or None (said on stderr) where TROUPE_TEST_NO_LANDLOCK=1 excuses a kernel
/// that cannot enforce the filesystem part; panics otherwise.
fn kernel_abi() -> Option<i32> {
    let why = match probe() {
        Ok(abi) if abi >= FS_ABI => return Some(abi),
        Ok(abi) => format!("the kernel's Landlock ABI is {abi}, below {FS_ABI}"),
        Err(why) => why,
    };
    if std::env::var("TROUPE_TEST_NO_LANDLOCK").is_ok_and(|v| v == "1") {
        eprintln!("not tested: {why} (TROUPE_TEST_NO_LANDLOCK=1)");
        return None;
    }
    panic!(
        "{why}: the Landlock sandbox cannot be tested here (set TROUPE_TEST_NO_LANDLOCK=1 on a kernel without it)"
    );
}

/// Runs `f` in a thread of its own restricted to `policy` (the test binary's other threads are
/// not).
fn confined<T: Send + 'static>(policy: Policy, f: impl FnOnce(Status) -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let status = restrict_self(&policy).expect("restrict_self");
        f(status)
    })
    .join()
    .expect("the confined thread panicked")
}

fn sh(script: &str) -> Output {
    Command::new("/bin/sh")
        .args(["-c", script])
        .output()
        .expect("start sh")
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[track_caller]
fn assert_denied<T: fmt::Debug>(r: io::Result<T>, what: &str) {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {}
        other => panic!("{what}: expected EACCES, got {other:?}"),
    }
}

/// A fresh directory, resolved (the rules are on resolved paths).
fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

#[test]
fn what_is_asked_follows_the_kernels_abi() {
    let tcp = Policy {
        connect_tcp: Some(vec![8080]),
        ..Policy::default()
    };
    assert!(matches!(
        plan(&Policy::default(), 2),
        Err(LandlockError::Unsupported { needs: 3, .. })
    ));
    assert!(matches!(
        plan(&tcp, 3),
        Err(LandlockError::Unsupported { needs: 4, .. })
    ));
    let status = |p: &Policy, abi| plan(p, abi).unwrap().status;
    let s3 = status(&Policy::default(), 3);
    assert_eq!(
        (s3.fs_ioctl, s3.net, s3.scope_signal),
        (false, false, false)
    );
    assert!(status(&tcp, 4).net);
    assert!(status(&Policy::default(), 5).fs_ioctl);
    assert!(!status(&Policy::default(), 5).scope_signal);
    let s7 = status(&Policy::default(), 7);
    assert_eq!((s7.fs_ioctl, s7.net, s7.scope_signal), (true, false, true));
    // Read-only paths get reading and running, never a right to change anything.
    let p7 = plan(&Policy::default(), 7).unwrap();
    assert_eq!(
        p7.read,
        AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir
    );
    assert!(
        p7.fs
            .contains(AccessFs::Truncate | AccessFs::Refer | AccessFs::WriteFile)
    );
    // Connecting to a pathname Unix socket is left alone on every ABI (the daemon's socket).
    let p9 = plan(&Policy::default(), 9).unwrap();
    assert!(!p9.fs.contains(AccessFs::ResolveUnix));
    assert!(p9.fs.contains(AccessFs::IoctlDev | AccessFs::Truncate));
    assert_eq!(
        status(&tcp, 7).to_string(),
        "Landlock ABI 7: files, device ioctls, TCP connections, signals restricted"
    );
}

#[test]
fn the_read_rules_cover_all_but_the_hidden_paths_and_the_way_to_them() {
    let (_keep, t) = temp();
    std::fs::create_dir_all(t.join("a/secret")).unwrap();
    std::fs::write(t.join("a/secret/key"), "k").unwrap();
    std::fs::write(t.join("a/x.txt"), "x").unwrap();
    std::fs::create_dir(t.join("b")).unwrap();
    std::fs::write(t.join("c.txt"), "c").unwrap();
    symlink(t.join("a"), t.join("link")).unwrap();
    let policy = Policy {
        // Through the link: hidden where it leads.
        hidden: vec![t.join("link/secret"), t.join("missing/deeper")],
        ..Policy::default()
    };
    let rules = grants(&policy).unwrap();
    let read: Vec<&Path> = rules
        .iter()
        .filter(|(_, g)| *g == Grant::Read)
        .map(|(p, _)| p.as_path())
        .collect();
    for granted in [t.join("a/x.txt"), t.join("b"), t.join("c.txt")] {
        assert!(read.contains(&granted.as_path()), "{granted:?} in {read:?}");
    }
    // Not the hidden path, not the way to it (a rule there would cover it), not the link.
    for path in read.iter() {
        assert!(
            !t.join("a/secret").starts_with(path) && !path.starts_with(t.join("a/secret")),
            "{path:?}"
        );
        assert!(!t.starts_with(path), "{path:?}");
        assert!(*path != t.join("link"), "{path:?}");
    }
    // What lies off the way stays readable: the rest of `/`.
    let first = t.components().nth(1).unwrap();
    let off_the_way = std::fs::read_dir("/")
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_name() != first.as_os_str() && !e.file_type().unwrap().is_symlink())
        .unwrap()
        .path();
    assert!(read.contains(&off_the_way.as_path()), "{off_the_way:?}");
    assert!(rules.contains(&(PathBuf::from("/dev/null"), Grant::Device)));

    // A writable path above a hidden one would uncover it.
    let conflict = Policy {
        writable: vec![t.join("a")],
        hidden: vec![t.join("a/secret")],
        ..Policy::default()
    };
    assert!(matches!(
        grants(&conflict),
        Err(LandlockError::Conflict { .. })
    ));
    // A missing writable path, or a relative one, is a mistake of the caller.
    for writable in [t.join("nowhere"), PathBuf::from("relative")] {
        let policy = Policy {
            writable: vec![writable],
            ..Policy::default()
        };
        assert!(matches!(grants(&policy), Err(LandlockError::Path { .. })));
    }
}

#[test]
fn only_the_writable_paths_and_the_terminal_devices_can_be_written() {
    let Some(_) = kernel_abi() else { return };
    let (_keep, t) = temp();
    let (rw, ro) = (t.join("rw"), t.join("ro"));
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::write(ro.join("old"), "kept").unwrap();
    std::fs::write(rw.join("old"), "mine").unwrap();
    let policy = Policy {
        writable: vec![rw.clone()],
        ..Policy::default()
    };
    let out = confined(policy, move |_| {
        // Under the writable path: everything.
        std::fs::write(rw.join("new"), "x").unwrap();
        std::fs::create_dir(rw.join("sub")).unwrap();
        std::fs::rename(rw.join("new"), rw.join("sub/moved")).unwrap();
        std::fs::write(rw.join("old"), "").unwrap();
        std::fs::remove_file(rw.join("sub/moved")).unwrap();
        std::fs::remove_dir(rw.join("sub")).unwrap();
        // Elsewhere: reading only.
        assert_eq!(std::fs::read_to_string(ro.join("old")).unwrap(), "kept");
        assert_denied(
            std::fs::write(ro.join("new"), "x"),
            "create in a read-only dir",
        );
        assert_denied(
            std::fs::OpenOptions::new()
                .append(true)
                .open(ro.join("old")),
            "open a read-only file for writing",
        );
        assert_denied(
            std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(ro.join("old")),
            "truncate a read-only file",
        );
        assert_denied(
            std::fs::remove_file(ro.join("old")),
            "delete a read-only file",
        );
        assert_denied(
            std::fs::create_dir(ro.join("d")),
            "make a read-only dir's subdir",
        );
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap()
            .write_all(b"gone")
            .unwrap();
        // A process it starts is held the same.
        // (perl's truncate is truncate(2) on the path, without opening it for writing.)
        sh(&format!(
            "echo child > '{rw}/child' && echo ok; echo no > '{ro}/child' || echo denied; \
             perl -e 'truncate(shift, 0) or die \"truncate: $!\\n\"' '{ro}/old' || echo kept; \
             echo x >/dev/null && echo devnull",
            rw = rw.display(),
            ro = ro.display()
        ))
    });
    let t2 = text(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\ndenied\nkept\ndevnull\n",
        "{t2}"
    );
    assert_eq!(t2.matches("Permission denied").count(), 2, "{t2}");
    assert_eq!(
        std::fs::read_to_string(t.join("rw/child")).unwrap(),
        "child\n"
    );
    assert!(!t.join("ro/child").exists());
    assert_eq!(std::fs::read_to_string(t.join("ro/old")).unwrap(), "kept");
}

#[test]
fn hidden_paths_cannot_be_read_even_through_links_but_their_siblings_can() {
    let Some(_) = kernel_abi() else { return };
    let (_keep, t) = temp();
    std::fs::create_dir_all(t.join("secret")).unwrap();
    std::fs::write(t.join("secret/key"), "key").unwrap();
    std::fs::write(t.join("token"), "token").unwrap();
    std::fs::write(t.join("open.txt"), "open").unwrap();
    symlink(t.join("secret"), t.join("link")).unwrap();
    symlink("/", t.join("root")).unwrap();
    let policy = Policy {
        hidden: vec![t.join("secret"), t.join("token"), t.join("not-yet")],
        ..Policy::default()
    };
    let t1 = t.clone();
    let out = confined(policy, move |_| {
        let t = t1;
        assert_eq!(std::fs::read_to_string(t.join("open.txt")).unwrap(), "open");
        assert!(std::fs::read_to_string("/etc/passwd").is_ok());
        assert_denied(
            std::fs::read_to_string(t.join("token")),
            "read a hidden file",
        );
        assert_denied(
            std::fs::read_to_string(t.join("secret/key")),
            "read under a hidden dir",
        );
        assert_denied(std::fs::read_dir(t.join("secret")), "list a hidden dir");
        assert_denied(
            std::fs::read_to_string(t.join("link/key")),
            "read through a link",
        );
        let around = t
            .join("root")
            .join(t.strip_prefix("/").unwrap())
            .join("token");
        assert_denied(std::fs::read_to_string(around), "read through a link to /");
        assert_denied(
            std::fs::write(t.join("not-yet"), "x"),
            "create a hidden path",
        );
        // What Landlock cannot hide: the directories on the way cannot be listed at all, and
        // a hidden path can still be looked at (stat: it exists, its size and times).
        assert_denied(std::fs::read_dir(&t), "list the way to a hidden path");
        assert!(std::fs::metadata(t.join("token")).is_ok());
        sh(&format!(
            "cd '{t}' && cat open.txt && cat token secret/key; ls secret || echo unlisted",
            t = t.display()
        ))
    });
    let all = text(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "openunlisted\n",
        "{all}"
    );
    assert_eq!(all.matches("Permission denied").count(), 3, "{all}");
    // Only the confined thread was restricted.
    assert_eq!(std::fs::read_to_string(t.join("token")).unwrap(), "token");
}

#[test]
fn a_writable_path_under_a_hidden_one_is_the_members() {
    let Some(_) = kernel_abi() else { return };
    let (_keep, t) = temp();
    let data = t.join("data");
    std::fs::create_dir_all(data.join("runs/r1")).unwrap();
    std::fs::write(data.join("token"), "secret").unwrap();
    std::fs::write(data.join("runs/other"), "other run").unwrap();
    let policy = Policy {
        writable: vec![data.join("runs/r1")],
        hidden: vec![data.clone()],
        ..Policy::default()
    };
    confined(policy, move |_| {
        std::fs::write(data.join("runs/r1/out"), "work").unwrap();
        assert_eq!(
            std::fs::read_to_string(data.join("runs/r1/out")).unwrap(),
            "work"
        );
        assert_denied(
            std::fs::read_to_string(data.join("token")),
            "read the data dir",
        );
        assert_denied(
            std::fs::read_to_string(data.join("runs/other")),
            "read another run",
        );
    });
}

#[test]
fn tcp_connections_go_only_to_the_allowed_ports() {
    let Some(abi) = kernel_abi() else { return };
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let (a, o) = (allowed.local_addr().unwrap(), other.local_addr().unwrap());
    let policy = Policy {
        connect_tcp: Some(vec![a.port()]),
        ..Policy::default()
    };
    if abi < NET_ABI {
        // Asked for and not enforceable: refused, never applied without it.
        let err = std::thread::spawn(move || restrict_self(&policy))
            .join()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(err, LandlockError::Unsupported { needs: 4, .. }),
            "{err}"
        );
        return;
    }
    let bound = confined(policy, move |status| {
        assert!(status.net, "{status}");
        TcpStream::connect(a).unwrap();
        assert_denied(TcpStream::connect(o), "connect to another port");
        // Binding is left alone (dev servers).
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    });
    assert_ne!(bound.port(), 0);
    // A shell's children are held the same (bash's /dev/tcp is not everywhere: python if any).
    let none = Policy {
        connect_tcp: Some(vec![]),
        ..Policy::default()
    };
    let script = format!(
        "( : <>/dev/tcp/127.0.0.1/{} ) && echo connected || echo refused",
        a.port()
    );
    if Path::new("/bin/bash").exists() {
        let out = confined(none, move |_| {
            Command::new("/bin/bash")
                .args(["-c", &script])
                .output()
                .unwrap()
        });
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "refused\n",
            "{}",
            text(&out)
        );
    }
    drop((allowed, other));
}

#[test]
fn signals_stay_inside_and_sockets_of_other_processes_stay_reachable() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

    let Some(abi) = kernel_abi() else { return };
    let (_keep, t) = temp();
    let mut outside = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = outside.id();
    let name = format!("troupe-landlock-test-{}", std::process::id());
    let abstract_addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let abstract_listener = UnixListener::bind_addr(&abstract_addr).unwrap();
    std::fs::create_dir(t.join("secret")).unwrap();
    let path_listener = UnixListener::bind(t.join("daemon.sock")).unwrap();
    let hidden_listener = UnixListener::bind(t.join("secret/agent.sock")).unwrap();
    let policy = Policy {
        hidden: vec![t.join("secret")],
        ..Policy::default()
    };
    let t1 = t.clone();
    let (status, out) = confined(policy, move |status| {
        // Neither abstract nor pathname sockets are limited (see restrict_self and plan): not
        // even one in a hidden dir, as the daemon's socket may be.
        UnixStream::connect_addr(&abstract_addr).unwrap();
        UnixStream::connect(t1.join("daemon.sock")).unwrap();
        UnixStream::connect(t1.join("secret/agent.sock")).unwrap();
        let out = sh(&format!(
            "kill -0 {pid} 2>/dev/null && echo outside || echo not-outside; sleep 5 & kill $! && echo inside"
        ));
        (status, out)
    });
    assert_eq!(status.scope_signal, abi >= SCOPE_ABI);
    let expected = if status.scope_signal {
        "not-outside\ninside\n"
    } else {
        "outside\ninside\n"
    };
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        expected,
        "{}",
        text(&out)
    );
    outside.kill().unwrap();
    outside.wait().unwrap();
    drop((abstract_listener, path_listener, hidden_listener));
}

/// What `restrict_and_exec_runs_the_program_confined` runs in a process of its own (the test
/// binary, filtered to this test): with `EXEC_POLICY` set, it restricts and becomes the program.
const EXEC_POLICY: &str = "TROUPE_TEST_LANDLOCK_EXEC";

#[test]
fn landlock_exec_child() {
    let Ok(json) = std::env::var(EXEC_POLICY) else {
        return; // Run alone, it has nothing to do.
    };
    let (policy, argv): (Policy, Vec<String>) = serde_json::from_str(&json).unwrap();
    let Err(e) = restrict_and_exec(&policy, &argv);
    panic!("restrict_and_exec: {e}");
}

#[test]
fn restrict_and_exec_runs_the_program_confined() {
    let Some(_) = kernel_abi() else { return };
    assert!(matches!(
        restrict_and_exec(&Policy::default(), &[]),
        Err(LandlockError::NoProgram)
    ));
    let (_keep, t) = temp();
    std::fs::create_dir(t.join("work")).unwrap();
    std::fs::write(t.join("token"), "secret").unwrap();
    let policy = Policy {
        writable: vec![t.join("work")],
        hidden: vec![t.join("token")],
        connect_tcp: None,
    };
    let script = format!(
        "cd '{t}' && echo done > work/out && echo wrote; cat token || echo hidden; grep NoNewPrivs /proc/self/status",
        t = t.display()
    );
    let argv = vec!["/bin/sh".to_string(), "-c".into(), script];
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["landlock::tests::landlock_exec_child", "--nocapture"])
        .env(EXEC_POLICY, serde_json::to_string(&(policy, argv)).unwrap())
        .output()
        .unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("wrote\nhidden\nNoNewPrivs:\t1\n"), "{all}");
    assert!(all.contains("Permission denied"), "{all}");
    assert_eq!(
        std::fs::read_to_string(t.join("work/out")).unwrap(),
        "done\n"
    );
}

#[test]
fn a_program_that_cannot_run_is_reported() {
    let Some(_) = kernel_abi() else { return };
    let err = std::thread::spawn(|| {
        restrict_and_exec(&Policy::default(), &["/nonexistent/program".to_string()])
    })
    .join()
    .unwrap()
    .unwrap_err();
    assert!(
        matches!(&err, LandlockError::Exec { program, .. } if program == "/nonexistent/program"),
        "{err}"
    );
}
