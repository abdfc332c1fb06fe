//! What a run's box holds, worked out before it starts: the paths it may write (its checkout,
//! its private temp dir, its CLI's state dirs, what its agent and project add), the paths it may
//! not read (the person's secrets, other vendors' credentials, the data dir), the hosts its
//! egress may reach; and the command lines that make the box (bubblewrap's, or `troupe
//! box-exec`'s for Landlock). It starts nothing and opens no socket (the daemon's `egress` module does).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use troupe_api::layout::Layout;
use troupe_engine::AgentDefinition;

use super::inside::{Relay, Spec};

/// The person's secrets, from their home: never readable in a box unless the person says so in
/// their own config (`[sandbox] readable`). Vendors' own credentials are in `Vendor::state`.
pub const DEFAULT_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".config/glab-cli",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".config/op",
    ".password-store",
    ".local/share/keyrings",
    ".bash_history",
    ".zsh_history",
    ".zhistory",
    ".history",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".lesshst",
    ".local/share/fish/fish_history",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".pki",
];

/// Environment variables no member gets unless its own definition sets them: the forges',
/// clouds' and registries' tokens, and the person's session bus.
pub const WITHHELD_ENV: &[&str] = &[
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GITLAB_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_CLIENT_SECRET",
    "NPM_TOKEN",
    "CARGO_REGISTRY_TOKEN",
    "DBUS_SESSION_BUS_ADDRESS",
    "SSH_AGENT_PID",
];

/// Package registries a project may let its members reach (`[sandbox] allow_registries`).
pub const REGISTRY_HOSTS: &[&str] = &[
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "pypi.org",
    "files.pythonhosted.org",
    "proxy.golang.org",
    "sum.golang.org",
    "rubygems.org",
];

/// The agent CLIs Troupe knows: their state dirs, credentials and model API hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Claude,
    Codex,
    Gemini,
}

impl Vendor {
    pub const ALL: [Vendor; 3] = [Vendor::Claude, Vendor::Codex, Vendor::Gemini];

    /// The vendor of an agent: its `acp:` runner, else its command's program.
    pub fn of(agent: &AgentDefinition) -> Option<Vendor> {
        let by_name = |name: &str| {
            let name = name.to_ascii_lowercase();
            if name.contains("claude") {
                Some(Vendor::Claude)
            } else if name.contains("codex") {
                Some(Vendor::Codex)
            } else if name.contains("gemini") {
                Some(Vendor::Gemini)
            } else {
                None
            }
        };
        if let Some(acp) = agent.runner.strip_prefix("acp:")
            && let Some(v) = by_name(acp)
        {
            return Some(v);
        }
        let program = agent.command.as_ref()?.first()?;
        let base = Path::new(program)
            .file_name()?
            .to_string_lossy()
            .into_owned();
        by_name(&base)
    }

    /// Its state and credentials, from the member's home (written by the CLI itself).
    pub fn state(self) -> &'static [&'static str] {
        match self {
            Vendor::Claude => &[".claude", ".claude.json", ".config/claude"],
            Vendor::Codex => &[".codex"],
            Vendor::Gemini => &[".gemini"],
        }
    }

    /// Its own config inside its state (read-only in the box).
    fn config_files(self) -> &'static [&'static str] {
        match self {
            Vendor::Claude => &[".claude/settings.json", ".claude/settings.local.json"],
            Vendor::Codex => &[".codex/config.toml"],
            Vendor::Gemini => &[".gemini/settings.json"],
        }
    }

    /// Environment variables that carry its credentials.
    fn key_env(self) -> &'static [&'static str] {
        match self {
            Vendor::Claude => &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
            ],
            Vendor::Codex => &["OPENAI_API_KEY", "CODEX_API_KEY"],
            Vendor::Gemini => &[
                "GEMINI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_APPLICATION_CREDENTIALS",
            ],
        }
    }

    /// Environment variables naming more of its state (a directory each).
    fn state_env(self) -> &'static [&'static str] {
        match self {
            Vendor::Claude => &["CLAUDE_CONFIG_DIR"],
            Vendor::Codex => &["CODEX_HOME"],
            Vendor::Gemini => &[],
        }
    }

    /// Its model API hosts.
    pub fn hosts(self) -> &'static [&'static str] {
        match self {
            Vendor::Claude => &["api.anthropic.com", "statsig.anthropic.com", "claude.ai"],
            Vendor::Codex => &["api.openai.com", "chatgpt.com", "auth.openai.com"],
            Vendor::Gemini => &[
                "generativelanguage.googleapis.com",
                "cloudcode-pa.googleapis.com",
                "oauth2.googleapis.com",
                "www.googleapis.com",
            ],
        }
    }

    /// Environment variables that point it at another model server (whose host is allowed).
    fn base_url_env(self) -> &'static [&'static str] {
        match self {
            Vendor::Claude => &["ANTHROPIC_BASE_URL"],
            Vendor::Codex => &["OPENAI_BASE_URL"],
            Vendor::Gemini => &["GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL"],
        }
    }
}

/// The person's `[sandbox]` in the data dir's `config.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonConfig {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// More paths no member may read.
    #[serde(default)]
    pub hidden: Vec<String>,
    /// Default secrets members may read after all (narrowing the list is the person's choice).
    #[serde(default)]
    pub readable: Vec<String>,
    /// Hosts every member's egress may reach.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

fn yes() -> bool {
    true
}

impl Default for PersonConfig {
    fn default() -> Self {
        PersonConfig {
            enabled: true,
            hidden: Vec::new(),
            readable: Vec::new(),
            allow_hosts: Vec::new(),
        }
    }
}

impl PersonConfig {
    /// `[sandbox]` of `<data_dir>/config.toml` (the defaults when absent).
    pub fn load(data_dir: &Path) -> Result<PersonConfig, String> {
        let path = data_dir.join("config.toml");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(PersonConfig::default());
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        match table.get("sandbox") {
            None => Ok(PersonConfig::default()),
            Some(section) => section
                .clone()
                .try_into()
                .map_err(|e| format!("{} [sandbox]: {e}", path.display())),
        }
    }
}

/// The person's side of every box: what is hidden and where things are.
#[derive(Debug, Clone, Default)]
pub struct Base {
    /// The person's home.
    pub home: PathBuf,
    pub data_dir: PathBuf,
    pub runtime_dir: PathBuf,
    /// Paths no member may read (existing or not).
    pub hidden: Vec<PathBuf>,
    /// Hosts every member's egress may reach (the person's config).
    pub allow_hosts: Vec<String>,
    /// Secrets the person let members read.
    pub readable: Vec<PathBuf>,
    /// This binary (the relay inside a bubblewrap box, Landlock's `box-exec`).
    pub troupe_exe: PathBuf,
}

impl Base {
    pub fn new(layout: &Layout, config: &PersonConfig, troupe_exe: &Path) -> Base {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/root"));
        let home = canonical(&home);
        let readable: Vec<PathBuf> = config.readable.iter().map(|p| expand(p, &home)).collect();
        let mut hidden: Vec<PathBuf> = DEFAULT_SECRETS
            .iter()
            .map(|p| home.join(p))
            .chain(config.hidden.iter().map(|p| expand(p, &home)))
            .filter(|p| !readable.contains(p))
            .collect();
        // The person's session runtime dir: their session bus (which starts programs outside
        // any box), agents' sockets (ssh, gpg), keyrings.
        let uid = rustix::process::getuid().as_raw();
        hidden.push(PathBuf::from(format!("/run/user/{uid}")));
        let data_dir = canonical(&layout.data_dir);
        hidden.push(data_dir.clone());
        Base {
            home,
            data_dir,
            runtime_dir: canonical(&layout.runtime_dir),
            hidden,
            allow_hosts: config.allow_hosts.clone(),
            readable,
            troupe_exe: canonical(troupe_exe),
        }
    }
}

/// A run's box.
#[derive(Debug, Clone)]
pub struct RunBox {
    pub run_id: String,
    /// Its own directory on the host (`<data dir>/boxes/<run>`): `tmp/` (its `/tmp`), `cache/`
    /// (its `XDG_CACHE_HOME`) and `egress/` (the egress socket, read-only in the box).
    pub box_dir: PathBuf,
    /// What it may write besides its checkout and `box_dir`.
    pub writable: Vec<PathBuf>,
    /// What it may not read besides the person's secrets.
    pub hidden: Vec<PathBuf>,
    /// The hosts its egress may reach without asking.
    pub allow_hosts: Vec<String>,
    /// Its CLI, when Troupe knows it.
    pub vendor: Option<Vendor>,
    /// Where the daemon's egress proxy waits for it; none: no network at all.
    pub egress: Option<Egress>,
    /// This binary (the relay inside a bubblewrap box, Landlock's `box-exec`).
    pub troupe_exe: PathBuf,
    /// What it may read that a private `/tmp` would cover (the person's project, when it lives
    /// there).
    pub visible: Vec<PathBuf>,
    /// Its `PATH`, where a program named bare is found.
    pub path: Option<String>,
    /// Files inside its writable state dirs it may read but not write: its CLI's own config
    /// (hooks there would run as the person, hosts there would widen the next run's list).
    pub frozen: Vec<PathBuf>,
    /// Environment variables it does not get: other vendors' keys, the forges' and clouds'
    /// tokens, the person's session bus (unless its own agent definition sets them).
    pub withheld_env: Vec<String>,
}

/// Where a run's egress goes.
#[derive(Debug, Clone)]
pub struct Egress {
    /// The proxy's Unix socket on the host (inside `box_dir`), for bubblewrap's relay.
    pub socket: PathBuf,
    /// The proxy's loopback TCP port, for a Landlock box (which shares the host's network).
    pub tcp_port: Option<u16>,
    /// Allowed loopback ports (a local model server): relayed from the box's own loopback.
    pub forwards: Vec<u16>,
}

/// A project's `[sandbox]` in `.troupe/config.toml`: it may add, never remove.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProjectBox {
    #[serde(default)]
    pub writable: Vec<String>,
    #[serde(default)]
    pub hidden: Vec<String>,
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Let members reach the package registries (`REGISTRY_HOSTS`).
    #[serde(default)]
    pub allow_registries: bool,
}

/// What a run's box is made of.
pub struct PlanInput<'a> {
    pub run_id: &'a str,
    pub agent: &'a AgentDefinition,
    /// The run's environment (its agent's `env` last), which may name another home.
    pub env: &'a [(String, String)],
    pub project: Option<&'a ProjectBox>,
    pub troupe_exe: &'a Path,
    /// The person's project, which the run may read.
    pub project_root: Option<&'a Path>,
}

/// The box of one run (no egress yet: the daemon opens it and fills `egress`). Makes the
/// run's own directories and the state dirs it may write, when missing.
pub fn plan(base: &Base, input: PlanInput<'_>) -> RunBox {
    let var = |name: &str| {
        input
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let member_home = var("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| canonical(Path::new(&h)))
        .unwrap_or_else(|| base.home.clone());
    let vendor = Vendor::of(input.agent);
    let mut writable = Vec::new();
    let mut hidden = Vec::new();
    // A home of the agent's own (its `env` names one that is not the person's) is its state.
    if member_home != base.home && !base.hidden.iter().any(|h| member_home.starts_with(h)) {
        writable.push(member_home.clone());
        hidden.extend(DEFAULT_SECRETS.iter().map(|p| member_home.join(p)));
    }
    for v in Vendor::ALL {
        let dirs = v.state().iter().map(|p| member_home.join(p));
        if Some(v) == vendor {
            writable.extend(dirs);
            writable.extend(
                v.state_env()
                    .iter()
                    .filter_map(|k| var(k))
                    .map(|p| canonical(Path::new(&p))),
            );
        } else {
            hidden.extend(dirs);
            if member_home != base.home {
                hidden.extend(v.state().iter().map(|p| base.home.join(p)));
            }
        }
    }
    let settings = &input.agent.sandbox;
    let project = input.project.cloned().unwrap_or_default();
    for p in settings.writable.iter().chain(&project.writable) {
        writable.push(expand(p, &member_home));
    }
    let not_writable: Vec<PathBuf> = settings
        .not_writable
        .iter()
        .map(|p| expand(p, &member_home))
        .collect();
    writable.retain(|p| !not_writable.contains(p));
    // Nothing hidden is made writable by an agent or a project: the person's secrets stay.
    writable.retain(|p| {
        !base
            .hidden
            .iter()
            .any(|h| p.starts_with(h) || h.starts_with(p))
    });
    for p in settings.hidden.iter().chain(&project.hidden) {
        hidden.push(expand(p, &member_home));
    }
    let mut allow_hosts: Vec<String> = Vec::new();
    if let Some(v) = vendor {
        allow_hosts.extend(v.hosts().iter().map(|h| h.to_string()));
        for k in v.base_url_env() {
            if let Some(host) = var(k).as_deref().and_then(host_of_url) {
                allow_hosts.push(host);
            }
        }
        // A gateway the ACP runner points it at (`acp.base_url`).
        if let Some(host) = input
            .agent
            .acp
            .as_ref()
            .and_then(|a| a.base_url.as_deref())
            .and_then(host_of_url)
        {
            allow_hosts.push(host);
        }
        if v == Vendor::Codex {
            // Codex names its model servers in its own config: the member's model is honoured.
            let home = var("CODEX_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| member_home.join(".codex"));
            allow_hosts.extend(codex_provider_hosts(&home.join("config.toml")));
        }
    }
    allow_hosts.extend(base.allow_hosts.iter().cloned());
    allow_hosts.extend(settings.allow_hosts.iter().cloned());
    allow_hosts.extend(project.allow_hosts.iter().cloned());
    if project.allow_registries {
        allow_hosts.extend(REGISTRY_HOSTS.iter().map(|h| h.to_string()));
    }
    allow_hosts.sort();
    allow_hosts.dedup();
    // What the person's definition names for it to run (a script under /tmp, say).
    let visible: Vec<PathBuf> = input
        .project_root
        .map(canonical)
        .into_iter()
        .chain(
            input
                .agent
                .command
                .iter()
                .flatten()
                .filter(|a| a.starts_with('/'))
                .map(|a| canonical(Path::new(a))),
        )
        .collect();
    let frozen: Vec<PathBuf> = vendor
        .map(|v| v.config_files())
        .unwrap_or_default()
        .iter()
        .map(|f| member_home.join(f))
        .chain(
            (vendor == Some(Vendor::Codex))
                .then(|| var("CODEX_HOME").map(|h| PathBuf::from(h).join("config.toml")))
                .flatten(),
        )
        .filter(|p| p.is_file())
        .collect();
    let own_env: Vec<&str> = input.agent.env.keys().map(String::as_str).collect();
    let withheld_env: Vec<String> = WITHHELD_ENV
        .iter()
        .chain(
            Vendor::ALL
                .iter()
                .filter(|v| Some(**v) != vendor)
                .flat_map(|v| v.key_env().iter()),
        )
        .filter(|k| !own_env.contains(k))
        .map(|k| k.to_string())
        .collect();
    let box_dir = base.data_dir.join("boxes").join(input.run_id);
    for dir in [box_dir.join("tmp"), box_dir.join("cache")] {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "a box's directory could not be made");
        }
    }
    // State dirs are made when missing (a file, such as `~/.claude.json`, only if it exists).
    writable.retain(|p| {
        if p.exists() {
            return true;
        }
        let is_file = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains(".json"));
        !is_file && std::fs::create_dir_all(p).is_ok()
    });
    writable.sort();
    writable.dedup();
    hidden.sort();
    hidden.dedup();
    RunBox {
        run_id: input.run_id.to_string(),
        box_dir,
        writable,
        hidden,
        allow_hosts,
        vendor,
        egress: None,
        troupe_exe: input.troupe_exe.to_path_buf(),
        visible,
        path: var("PATH"),
        frozen,
        withheld_env,
    }
}

/// The hosts of the model providers Codex's `config.toml` names (`[model_providers.*]
/// base_url`, and `openai_base_url`).
fn codex_provider_hosts(config: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(config) else {
        return Vec::new();
    };
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        return Vec::new();
    };
    let mut urls: Vec<&str> = table
        .get("model_providers")
        .and_then(toml::Value::as_table)
        .into_iter()
        .flat_map(|providers| providers.values())
        .filter_map(|p| p.get("base_url")?.as_str())
        .collect();
    urls.extend(table.get("openai_base_url").and_then(toml::Value::as_str));
    urls.into_iter().filter_map(host_of_url).collect()
}

/// `host[:port]` of a URL (`http://127.0.0.1:8080/v1` → `127.0.0.1:8080`).
pub fn host_of_url(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    (!authority.is_empty()).then(|| authority.to_ascii_lowercase())
}

/// A path of the config: `~/…` from `home`, else as written.
fn expand(p: &str, home: &Path) -> PathBuf {
    match p.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None if p == "~" => home.to_path_buf(),
        None => PathBuf::from(p),
    }
}

pub(super) fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// The environment every boxed process gets.
fn box_env(
    layer: &str,
    run: Option<&RunBox>,
    tmp: &Path,
    proxy_port: Option<u16>,
) -> Vec<(String, String)> {
    let mut env = vec![
        (super::BOX_MARKER.to_string(), layer.to_string()),
        // Claude Code runs its bypass-permissions mode as root only when told it is sandboxed:
        // in the box it is.
        ("IS_SANDBOX".into(), "1".into()),
        ("TMPDIR".into(), tmp.display().to_string()),
        // The person's ssh agent would sign with their keys.
        ("SSH_AUTH_SOCK".into(), String::new()),
    ];
    if let Some(run) = run {
        env.push((
            "XDG_CACHE_HOME".into(),
            run.box_dir.join("cache").display().to_string(),
        ));
    }
    if let Some(port) = proxy_port {
        let url = format!("http://127.0.0.1:{port}");
        for k in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            env.push((k.into(), url.clone()));
        }
        for k in ["NO_PROXY", "no_proxy"] {
            env.push((k.into(), "localhost,127.0.0.1,::1".into()));
        }
    }
    env
}

/// The port the relay listens on inside a bubblewrap box, clear of the forwarded ones.
fn relay_port(forwards: &[u16]) -> u16 {
    (3128..).find(|p| !forwards.contains(p)).unwrap_or(3128)
}

/// Whether `workdir` is a checkout Troupe made (under the data dir), not the person's own.
fn is_troupes(base: &Base, workdir: &Path) -> bool {
    workdir.starts_with(&base.data_dir) && workdir != base.data_dir
}

/// Where `name` is on `path` (else the daemon's PATH): an executable file, if anywhere.
fn on_path(name: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = match path {
        Some(p) => std::ffi::OsString::from(p),
        None => std::env::var_os("PATH")?,
    };
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// What a linked checkout needs of the repository it borrows from: a worktree's git dir (its
/// `.git` file names it) and common dir, a clone's alternates (the person's object dir).
fn borrowed_repos(workdir: &Path) -> Vec<PathBuf> {
    let git = workdir.join(".git");
    let mut out = Vec::new();
    if git.is_file() {
        if let Ok(text) = std::fs::read_to_string(&git)
            && let Some(dir) = text.trim().strip_prefix("gitdir:")
        {
            let dir = canonical(&workdir.join(dir.trim()));
            // `<repo>/.git/worktrees/<name>`: the whole `.git`.
            match dir.parent().and_then(Path::parent) {
                Some(common) if dir.parent().is_some_and(|p| p.ends_with("worktrees")) => {
                    out.push(common.to_path_buf())
                }
                _ => out.push(dir),
            }
        }
    } else if let Ok(text) = std::fs::read_to_string(git.join("objects/info/alternates")) {
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let objects = canonical(&git.join("objects").join(line));
            // `<repo>/.git/objects`: the repository's `.git`, so `git fetch <repo>` works too.
            out.push(objects.parent().map_or(objects.clone(), Path::to_path_buf));
        }
    }
    // The member writes these files in its own checkout: only a git dir is ever bound (never,
    // say, an ssh agent's socket it names).
    out.retain(|p| p.join("HEAD").is_file() && p.join("objects").is_dir());
    out
}

/// bubblewrap's command line for `argv` in `workdir`. Mounts, in order: the root read-only; a
/// private `/tmp` (its sockets — an ssh agent's, X11's — are the person's), with what the run
/// needs from the host's `/tmp` bound back read-only (its program, its repository, the runtime
/// dir); the data dir as an empty tmpfs with the run's checkout, its box dir and the runtime dir
/// bound back; the writable state dirs; then the secrets hidden (after the writable binds, so a
/// secret inside one stays hidden), and whatever lies inside a hidden path bound back again.
pub fn bwrap_argv(
    program: &Path,
    relay_exe: Option<&Path>,
    base: &Base,
    run: Option<&RunBox>,
    argv: Vec<String>,
    workdir: &Path,
) -> Vec<String> {
    let s = |p: &Path| p.display().to_string();
    let mut out = vec![s(program)];
    // No capability inside, even for a root member (which could otherwise unmount what hides
    // a secret or remount the root writable). (No controlling terminal to type into either:
    // every boxed command starts in a session of its own, `spawn::Group::Session`.)
    out.extend(
        [
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
        ]
        .iter()
        .map(|a| a.to_string()),
    );
    // Binds made after the root: (writable, source = destination).
    let mut binds: Vec<(bool, PathBuf)> = Vec::new();
    match run {
        Some(run) => out.extend(["--bind".into(), s(&run.box_dir.join("tmp")), "/tmp".into()]),
        None => out.extend(["--tmpfs".into(), "/tmp".into()]),
    }
    // The host's sockets (a container engine's, the system bus, screen's) live in /run: an
    // empty one, with what the run needs bound back below.
    let run_dir = Path::new("/run");
    if run_dir.is_dir() {
        out.extend(["--tmpfs".into(), "/run".into()]);
    }
    let tmp = Path::new("/tmp");
    let covered =
        |p: &Path| (p.starts_with(tmp) && p != tmp) || (p.starts_with(run_dir) && p != run_dir);
    // Its program only (the person's definition names it): the other words may come from
    // the member itself (a terminal it asks for) and must not bind anything into the box.
    let mut seen: Vec<PathBuf> = argv
        .first()
        .filter(|a| a.starts_with('/'))
        .map(PathBuf::from)
        .into_iter()
        .collect();
    // A program named bare is found on the PATH inside the box (the run's, else the
    // daemon's): where it lies under /tmp, the box shows its directory and where a link leads.
    if let Some(found) = argv
        .first()
        .filter(|a| !a.contains('/'))
        .and_then(|a| on_path(a, run.and_then(|r| r.path.as_deref())))
    {
        seen.extend(found.parent().map(Path::to_path_buf));
        seen.extend(canonical(&found).parent().map(Path::to_path_buf));
    }
    seen.extend(relay_exe.map(Path::to_path_buf));
    seen.push(base.runtime_dir.clone());
    seen.push(base.home.clone());
    seen.extend(borrowed_repos(workdir));
    if let Some(run) = run {
        seen.extend(run.visible.iter().cloned());
    }
    for p in seen {
        let p = canonical(&p);
        if covered(&p) && p.exists() && !p.starts_with(&base.data_dir) {
            binds.push((false, p));
        }
    }
    if base.runtime_dir.starts_with(&base.data_dir) && base.runtime_dir.exists() {
        binds.push((false, base.runtime_dir.clone()));
    }
    binds.push((true, workdir.to_path_buf()));
    let mut proxy_port = None;
    let mut relay = None;
    if let Some(run) = run {
        // Its cache and the egress socket, each on its own: never the box dir that holds them
        // (a member could swap what a later box binds for a link to anywhere).
        binds.push((true, run.box_dir.join("cache")));
        binds.extend(run.writable.iter().map(|p| (true, p.clone())));
        binds.extend(run.frozen.iter().map(|p| (false, p.clone())));
        // The socket's own folder, read-only: a daemon restarted after a kill -9 makes the
        // socket again there, and the box sees it.
        if let Some(dir) = run.egress.as_ref().and_then(|e| e.socket.parent())
            && dir.is_dir()
            && dir != run.box_dir
        {
            binds.push((false, dir.to_path_buf()));
        }
        if let (Some(egress), Some(_)) = (&run.egress, relay_exe) {
            let port = relay_port(&egress.forwards);
            proxy_port = Some(port);
            relay = Some(Relay {
                socket: egress.socket.clone(),
                port,
                forwards: egress.forwards.clone(),
            });
        }
    }
    if !is_troupes(base, workdir) && workdir.join(".git").exists() {
        // The person's own checkout (a member working in the project itself): its edits need
        // the person's approval, and its repository and Troupe config stay the person's.
        binds.push((false, workdir.join(".git")));
        let config = workdir.join(".troupe");
        if config.is_dir() || std::fs::create_dir(&config).is_ok() {
            binds.push((false, config));
        }
    }
    let bind = |out: &mut Vec<String>, (writable, p): &(bool, PathBuf)| {
        let how = if *writable { "--bind" } else { "--ro-bind" };
        out.extend([how.into(), s(p), s(p)]);
    };
    // The data dir (the token, the database, other runs' checkouts and boxes) is an empty
    // tmpfs, over whatever bind holds it (a checkout that contains it); what the run needs of it
    // is bound back, and it is made read-only last.
    let (inside, outside): (Vec<_>, Vec<_>) = binds
        .iter()
        .partition(|(_, p)| p.starts_with(&base.data_dir));
    for b in outside {
        bind(&mut out, b);
    }
    out.extend(["--tmpfs".into(), s(&base.data_dir)]);
    for b in inside {
        bind(&mut out, b);
    }
    // The person's secrets and other vendors' credentials: an empty read-only tmpfs over a
    // directory, /dev/null over a file, at the path and where a symlink there leads.
    let hidden: Vec<&PathBuf> = base
        .hidden
        .iter()
        .chain(run.map(|r| r.hidden.as_slice()).unwrap_or_default())
        .filter(|p| **p != base.data_dir)
        .collect();
    let mut covered = Vec::new();
    let mut emptied = Vec::new();
    for p in hidden {
        let Ok(meta) = std::fs::metadata(p) else {
            continue;
        };
        let target = canonical(p);
        let also = (target != *p).then_some(target);
        for path in std::iter::once(p.clone()).chain(also) {
            if meta.is_dir() {
                out.extend(["--tmpfs".into(), s(&path)]);
                emptied.push(path.clone());
            } else {
                out.extend(["--ro-bind".into(), "/dev/null".into(), s(&path)]);
            }
            covered.push(path);
        }
    }
    // What a hidden dir covered that the run needs (the runtime dir inside the person's
    // `/run/user/<uid>`, say) comes back; then each emptied dir is made read-only.
    for b in binds
        .iter()
        .filter(|(_, p)| covered.iter().any(|c| p.starts_with(c) && p != c))
    {
        bind(&mut out, b);
    }
    for path in &emptied {
        out.extend(["--remount-ro".into(), s(path)]);
    }
    out.extend(["--remount-ro".into(), s(&base.data_dir)]);
    out.extend(
        ["--unshare-pid", "--unshare-ipc", "--unshare-net"]
            .iter()
            .map(|a| a.to_string()),
    );
    for (k, v) in box_env("bubblewrap", run, tmp, proxy_port) {
        out.extend(["--setenv".into(), k, v]);
    }
    for k in run.map(|r| r.withheld_env.as_slice()).unwrap_or_default() {
        out.extend(["--unsetenv".into(), k.clone()]);
    }
    out.extend(["--chdir".into(), s(workdir), "--".into()]);
    if let (Some(relay), Some(exe)) = (relay, relay_exe) {
        let spec = Spec {
            landlock: None,
            relay: Some(relay),
            env: Vec::new(),
            unset: Vec::new(),
        };
        out.extend([
            s(exe),
            "box-exec".into(),
            "--spec".into(),
            spec.to_arg(),
            "--".into(),
        ]);
    }
    out.extend(argv);
    out
}

/// `troupe box-exec`'s command line for `argv` in `workdir`, under Landlock.
pub fn landlock_argv(
    exe: &Path,
    base: &Base,
    run: Option<&RunBox>,
    argv: Vec<String>,
    workdir: &Path,
) -> Result<Vec<String>, String> {
    let mut writable = Vec::new();
    if is_troupes(base, workdir) || !workdir.join(".git").exists() {
        writable.push(workdir.to_path_buf());
    } else {
        // The person's own checkout: everything in it but its repository. (Landlock is an
        // allow-list: a new file at its top cannot be made.)
        let entries = std::fs::read_dir(workdir)
            .map_err(|e| format!("the box cannot list {}: {e}", workdir.display()))?;
        writable.extend(
            entries
                .flatten()
                .filter(|e| e.file_name() != ".git" && e.file_name() != ".troupe")
                // A link at its top would make wherever it leads writable.
                .filter(|e| e.file_type().is_ok_and(|t| !t.is_symlink()))
                .map(|e| e.path()),
        );
    }
    let (tmp, connect) = match run {
        Some(run) => {
            writable.push(run.box_dir.join("tmp"));
            writable.push(run.box_dir.join("cache"));
            writable.extend(run.writable.iter().cloned());
            let mut ports: Vec<u16> = Vec::new();
            if let Some(e) = &run.egress {
                ports.extend(e.tcp_port);
                ports.extend(e.forwards.iter().copied());
            }
            (run.box_dir.join("tmp"), ports)
        }
        None => {
            // No run, no box dir of its own: a temp dir of the data dir's, made for it.
            let tmp = base
                .data_dir
                .join("boxes")
                .join(format!("cmd-{}", std::process::id()));
            std::fs::create_dir_all(&tmp)
                .map_err(|e| format!("the box's temp dir {}: {e}", tmp.display()))?;
            writable.push(tmp.clone());
            (tmp, Vec::new())
        }
    };
    // Landlock cannot hide a path inside a writable one: what lies in a home of the agent's
    // own (its `env` named it) is the agent's, not the person's.
    let hidden: Vec<PathBuf> = base
        .hidden
        .iter()
        .chain(run.map(|r| r.hidden.as_slice()).unwrap_or_default())
        .filter(|h| !writable.iter().any(|w| h.starts_with(w)))
        .cloned()
        .collect();
    let proxy = run.and_then(|r| r.egress.as_ref()).and_then(|e| e.tcp_port);
    let spec = Spec {
        landlock: Some(super::landlock::Policy {
            writable,
            hidden,
            connect_tcp: Some(connect),
        }),
        relay: None,
        env: box_env("landlock", run, &tmp, proxy),
        unset: run.map(|r| r.withheld_env.clone()).unwrap_or_default(),
    };
    let mut out = vec![
        exe.display().to_string(),
        "box-exec".into(),
        "--spec".into(),
        spec.to_arg(),
        "--".into(),
    ];
    out.extend(argv);
    Ok(out)
}

#[cfg(test)]
mod tests;
