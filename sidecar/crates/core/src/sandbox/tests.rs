//! The box for real, under bubblewrap: a command writes its checkout and its own /tmp, and
//! nothing else; reads none of the person's secrets nor the data dir; has no network; and
//! without any layer, a member does not start. (`scripts/test` installs bubblewrap; the
//! relay, Landlock's `box-exec` and whole members are tried in `tests/it/sandbox.rs`.)

use std::process::Command;

use super::*;

fn sh(sandbox: &Sandbox, workdir: &Path, script: &str) -> (bool, String) {
    let argv = sandbox
        .argv(vec!["sh".into(), "-c".into(), script.into()], workdir)
        .unwrap();
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(workdir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_command_in_the_box_writes_only_its_checkout_and_its_own_tmp_and_reads_no_secret() {
    let Ok(program) = try_bwrap() else {
        panic!(
            "bubblewrap is needed for this test (Debian: apt install bubblewrap): {:?}",
            try_bwrap()
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let home = root.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::write(home.join(".bashrc"), "# rc\n").unwrap();
    let data = root.join("data");
    let work = data.join("clones/p/dev-0");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(data.join("run")).unwrap();
    std::fs::write(data.join("token"), "SECRET-TOKEN").unwrap();
    let project = root.join("project");
    std::fs::create_dir_all(project.join(".git")).unwrap();
    let base = plan::Base {
        home: home.clone(),
        data_dir: data.clone(),
        runtime_dir: data.join("run"),
        hidden: vec![home.join(".ssh"), data.clone()],
        allow_hosts: Vec::new(),
        readable: Vec::new(),
        troupe_exe: PathBuf::from("/bin/true"),
    };
    let sandbox = Sandbox {
        layer: Layer::Bwrap(Arc::new(program)),
        status: "on".into(),
        base: Arc::new(base),
        run: None,
    };
    let host_tmp_marker = format!("/tmp/troupe-box-test-{}", std::process::id());
    let (ok, out) = sh(
        &sandbox,
        &work,
        &format!(
            "echo hi > {w}/made && echo tmp > {t} && test -f {t} && echo TMP-OK; \
             echo x >> {h}/.bashrc || echo HOME-REFUSED; \
             cat {h}/.ssh/id_ed25519 || echo SSH-HIDDEN; \
             cat {d}/token || echo TOKEN-HIDDEN; \
             echo x > {p}/pwned || echo PROJECT-REFUSED",
            w = work.display(),
            t = host_tmp_marker,
            h = home.display(),
            d = data.display(),
            p = project.display(),
        ),
    );
    assert!(ok, "{out}");
    for said in [
        "TMP-OK",
        "HOME-REFUSED",
        "SSH-HIDDEN",
        "TOKEN-HIDDEN",
        "PROJECT-REFUSED",
    ] {
        assert!(out.contains(said), "{said} missing from:\n{out}");
    }
    assert!(
        !out.contains("PRIVATE KEY") && !out.contains("SECRET-TOKEN"),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(work.join("made")).unwrap(), "hi\n");
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# rc\n"
    );
    assert!(
        !Path::new(&host_tmp_marker).exists(),
        "the box's /tmp is its own"
    );
    assert!(!project.join("pwned").exists());
}

#[test]
fn without_a_layer_members_do_not_start_and_the_error_names_the_fix() {
    let sandbox = Sandbox {
        layer: Layer::Missing,
        status: "unavailable: bubblewrap (bwrap) is not installed; run `troupe doctor`".into(),
        base: Arc::new(plan::Base::default()),
        run: None,
    };
    let err = sandbox
        .argv(vec!["true".into()], Path::new("/"))
        .unwrap_err();
    assert!(err.contains("troupe doctor"), "{err}");
    assert!(!sandbox.is_on());
    // Turned off by the person: the command runs as it is.
    let off = Sandbox::off("test");
    assert_eq!(
        off.argv(vec!["true".into()], Path::new("/")).unwrap(),
        vec!["true".to_string()]
    );
}
