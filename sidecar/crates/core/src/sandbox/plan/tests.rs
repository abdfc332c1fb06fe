//! What a run's box is made of: each vendor's CLI writes its own state and reads none of the
//! others'; an agent or a project adds but never uncovers a secret; a secret inside a writable
//! dir stays hidden.

use serde_json::json;

use super::*;

fn agent(runner: &str, command: Option<&[&str]>) -> AgentDefinition {
    let mut def = json!({ "name": "a", "runner": runner });
    if let Some(c) = command {
        def["command"] = json!(c);
    }
    serde_json::from_value(def).unwrap()
}

fn base(dir: &Path) -> Base {
    let home = dir.join("home");
    for d in [".ssh", ".claude", ".codex", ".gemini"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".netrc"), "machine x password y").unwrap();
    let layout = Layout {
        data_dir: dir.join("data"),
        runtime_dir: dir.join("data/run"),
    };
    std::fs::create_dir_all(&layout.runtime_dir).unwrap();
    let mut b = Base::new(&layout, &PersonConfig::default(), Path::new("/bin/true"));
    b.home = home.canonicalize().unwrap();
    b.hidden = DEFAULT_SECRETS.iter().map(|p| b.home.join(p)).collect();
    b.hidden.push(b.data_dir.clone());
    b
}

/// The box of run `run_id` of `agent`, with `env` and a project's `[sandbox]`.
fn planned(
    b: &Base,
    run_id: &str,
    agent: &AgentDefinition,
    env: &[(String, String)],
    project: Option<&ProjectBox>,
) -> RunBox {
    let input = PlanInput {
        run_id,
        agent,
        env,
        project,
        troupe_exe: Path::new("/bin/true"),
        project_root: None,
    };
    plan(b, input)
}

/// bubblewrap's command line for `argv` in `workdir` (no relay).
fn bwrap(b: &Base, run: Option<&RunBox>, argv: Vec<String>, workdir: &Path) -> Vec<String> {
    bwrap_argv(Path::new("/usr/bin/bwrap"), None, b, run, argv, workdir)
}

/// Where `argv` first (or last) has option `what` on `path`.
fn first_at(argv: &[String], what: &str, path: &Path) -> usize {
    at(argv, what, path, false)
}

fn last_at(argv: &[String], what: &str, path: &Path) -> usize {
    at(argv, what, path, true)
}

fn at(argv: &[String], what: &str, path: &Path, last: bool) -> usize {
    let p = path.display().to_string();
    let hit = |w: &[String]| w[0] == what && w[1] == p;
    let found = if last {
        argv.windows(2).rposition(hit)
    } else {
        argv.windows(2).position(hit)
    };
    found.unwrap_or_else(|| panic!("{what} {p} in {argv:?}"))
}

#[test]
fn vendors_are_known_by_runner_or_program() {
    assert_eq!(Vendor::of(&agent("acp:claude", None)), Some(Vendor::Claude));
    assert_eq!(Vendor::of(&agent("acp:codex", None)), Some(Vendor::Codex));
    assert_eq!(
        Vendor::of(&agent("process", Some(&["/usr/bin/gemini", "--acp"]))),
        Some(Vendor::Gemini)
    );
    assert_eq!(
        Vendor::of(&agent("process", Some(&["sh", "-c", "claude"]))),
        None
    );
    assert_eq!(
        host_of_url("http://127.0.0.1:4010/v1").as_deref(),
        Some("127.0.0.1:4010")
    );
    assert_eq!(
        host_of_url("https://user:pw@Api.Example.com/x").as_deref(),
        Some("api.example.com")
    );
}

#[test]
fn each_cli_writes_its_own_state_and_reads_no_other_vendors() {
    let dir = tempfile::tempdir().unwrap();
    let b = base(dir.path());
    let claude = agent("acp:claude", None);
    let env = vec![(
        "ANTHROPIC_BASE_URL".to_string(),
        "http://127.0.0.1:4010".to_string(),
    )];
    let r = planned(&b, "r1", &claude, &env, None);
    assert!(r.writable.contains(&b.home.join(".claude")));
    assert!(
        !r.writable
            .iter()
            .any(|p| p.ends_with(".codex") || p.ends_with(".gemini"))
    );
    assert!(
        r.hidden.contains(&b.home.join(".codex")) && r.hidden.contains(&b.home.join(".gemini"))
    );
    assert!(r.allow_hosts.contains(&"api.anthropic.com".to_string()));
    assert!(
        r.allow_hosts.contains(&"127.0.0.1:4010".to_string()),
        "{:?}",
        r.allow_hosts
    );
    assert!(!r.allow_hosts.iter().any(|h| h.contains("openai")));
    assert!(r.box_dir.join("tmp").is_dir());

    let shell = agent("process", Some(&["sh"]));
    let r = planned(&b, "r2", &shell, &[], None);
    assert!(r.writable.is_empty(), "{:?}", r.writable);
    assert!(r.allow_hosts.is_empty());
    for v in [".claude", ".codex", ".gemini"] {
        assert!(r.hidden.contains(&b.home.join(v)), "{v}");
    }
}

#[test]
fn an_agent_or_a_project_adds_but_never_uncovers_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let b = base(dir.path());
    let mut a = agent("process", Some(&["sh"]));
    a.sandbox.writable = vec!["~/.ssh".into(), "~/work-cache".into()];
    a.sandbox.allow_hosts = vec!["pypi.org".into()];
    let project = ProjectBox {
        writable: vec![b.data_dir.join("token").display().to_string()],
        hidden: vec!["~/notes".into()],
        allow_hosts: vec![],
        allow_registries: true,
    };
    let r = planned(&b, "r3", &a, &[], Some(&project));
    assert_eq!(r.writable, vec![b.home.join("work-cache")]);
    assert!(r.hidden.contains(&b.home.join("notes")));
    assert!(
        r.allow_hosts.contains(&"crates.io".to_string())
            && r.allow_hosts.contains(&"pypi.org".to_string())
    );
}

#[test]
fn bubblewrap_hides_secrets_after_the_writable_binds() {
    let dir = tempfile::tempdir().unwrap();
    let b = base(dir.path());
    let a = agent("acp:claude", None);
    let r = planned(&b, "r4", &a, &[], None);
    let work = b.data_dir.join("clones/p/dev-0");
    std::fs::create_dir_all(&work).unwrap();
    let argv = bwrap(&b, Some(&r), vec!["sh".into()], &work);
    let at = |what: &str, path: &Path| first_at(&argv, what, path);
    assert!(at("--bind", &b.home.join(".claude")) < at("--tmpfs", &b.home.join(".ssh")));
    assert!(at("--tmpfs", &b.data_dir) < at("--bind", &work));
    assert!(argv.contains(&"--unshare-net".to_string()));
    assert!(
        argv.windows(2)
            .any(|w| w[0] == "--ro-bind" && w[1] == "/dev/null"),
        "a hidden file is /dev/null"
    );
    assert_eq!(argv.last().map(String::as_str), Some("sh"));
}

#[test]
fn a_checkout_that_holds_the_data_dir_does_not_uncover_it() {
    let dir = tempfile::tempdir().unwrap();
    let b = base(dir.path());
    let root = dir.path().canonicalize().unwrap();
    let argv = bwrap(&b, None, vec!["true".into()], &root);
    let pos = |what: &str, path: &Path| first_at(&argv, what, path);
    assert!(
        pos("--bind", &root) < pos("--tmpfs", &b.data_dir),
        "{argv:?}"
    );
}

#[test]
fn codex_may_reach_the_model_servers_its_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let b = base(dir.path());
    let codex_home = dir.path().join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        "model_provider = \"mock\"\n[model_providers.mock]\nbase_url = \"http://127.0.0.1:4567/v1\"\nwire_api = \"responses\"\n",
    )
    .unwrap();
    let env = vec![("CODEX_HOME".to_string(), codex_home.display().to_string())];
    let codex = agent("acp:codex", None);
    let r = planned(&b, "r5", &codex, &env, None);
    assert!(
        r.allow_hosts.contains(&"127.0.0.1:4567".to_string()),
        "{:?}",
        r.allow_hosts
    );
    assert!(
        r.writable.contains(&codex_home.canonicalize().unwrap()),
        "{:?}",
        r.writable
    );
}

#[test]
fn what_a_member_writes_or_asks_binds_nothing_but_git_dirs_into_the_box() {
    let dir = tempfile::tempdir().unwrap();
    let b = base(dir.path());
    let work = b.data_dir.join("clones/p/dev-0");
    std::fs::create_dir_all(work.join(".git/objects/info")).unwrap();
    // Under /tmp, as a person's ssh agent socket would be.
    let agent_dir = tempfile::Builder::new()
        .prefix("ssh-")
        .tempdir_in("/tmp")
        .unwrap();
    let socket = agent_dir.path().join("agent.1");
    std::fs::write(&socket, "").unwrap();
    std::fs::write(
        work.join(".git/objects/info/alternates"),
        format!(
            "{}\n{}/objects\n",
            socket.display(),
            agent_dir.path().display()
        ),
    )
    .unwrap();
    let argv = bwrap(
        &b,
        None,
        vec![
            "sh".into(),
            "-c".into(),
            "x".into(),
            socket.display().to_string(),
        ],
        &work,
    );
    let named = agent_dir.path().display().to_string();
    let bound = argv
        .windows(2)
        .any(|w| (w[0] == "--ro-bind" || w[0] == "--bind") && w[1].starts_with(&named));
    assert!(!bound, "{argv:?}");
}

#[test]
fn a_runtime_dir_inside_a_hidden_dir_comes_back_before_that_dir_is_made_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = base(dir.path());
    // As `$XDG_RUNTIME_DIR/troupe-…` inside the person's hidden `/run/user/<uid>`.
    let session = dir.path().canonicalize().unwrap().join("run-user");
    b.runtime_dir = session.join("troupe-1");
    std::fs::create_dir_all(&b.runtime_dir).unwrap();
    b.hidden.push(session.clone());
    let work = b.data_dir.join("clones/p/dev-0");
    std::fs::create_dir_all(&work).unwrap();
    let argv = bwrap(&b, None, vec!["true".into()], &work);
    let last = |what: &str, path: &Path| last_at(&argv, what, path);
    assert!(
        last("--tmpfs", &session) < last("--ro-bind", &b.runtime_dir),
        "{argv:?}"
    );
    assert!(
        last("--ro-bind", &b.runtime_dir) < last("--remount-ro", &session),
        "{argv:?}"
    );
}
