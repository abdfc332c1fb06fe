//! The layer invariants ARCHITECTURE.md lists (under Invariants, Layers), checked on every test
//! run: no circle between the modules of a crate (read from `crate::` paths), no door importing
//! another door, the engine without IO, SQL only in the store, wire formats only in the doors,
//! and each lower crate the only user of its library (git, wasmtime, SQLite).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::workspace_root;

fn crates_dir() -> PathBuf {
    workspace_root().join("sidecar/crates")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's production code (its comments included): unit tests (after `#[cfg(test)]`, or in a `tests.rs` /
/// `*_tests.rs` file) may reach anything.
fn production_code(file: &Path) -> Option<String> {
    let name = file.file_name().unwrap().to_string_lossy();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return None;
    }
    let text = std::fs::read_to_string(file).unwrap();
    // Doc comments count too: a comment that sends the reader up the arrows is a circle for them.
    Some(text.split("#[cfg(test)]").next().unwrap().to_string())
}

/// The top-level modules a piece of code names through `crate::` (`use crate::{a, b::c}` too).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        // Not `troupe_crate::` or the like.
        if code[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first segment of every item of the group, at its top level.
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && depth == 0 && !c.is_whitespace() => {
                        let name = ident(&group[j..]);
                        if !name.is_empty() {
                            refs.insert(name);
                        }
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

/// The module graph of one crate: top-level module → the top-level modules it names. A module
/// is a file under `src/` or a folder's subtree; items of the crate root are left out.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        modules.insert(first.trim_end_matches(".rs").to_string());
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" || module == "bin" {
            continue;
        }
        let Some(code) = production_code(file) else {
            continue;
        };
        let edges = graph.entry(module.clone()).or_default();
        for target in crate_refs(&code) {
            if target != module && modules.contains(&target) {
                edges.insert(target);
            }
        }
    }
    graph
}

/// A circle in the graph, as `a -> b -> a`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<String> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle.join(" -> "));
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(crates_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 8, "found the crates: {dirs:?}");
    dirs
}

#[test]
fn no_circle_between_the_modules_of_a_crate() {
    let mut circles = Vec::new();
    for dir in crate_dirs() {
        // The library and each binary of a folder of its own (`src/bin/<name>/main.rs`) is a
        // crate of its own.
        let mut roots = vec![dir.join("src")];
        if let Ok(bins) = std::fs::read_dir(dir.join("src/bin")) {
            roots.extend(
                bins.map(|e| e.unwrap().path())
                    .filter(|p| p.join("main.rs").exists()),
            );
        }
        for root in roots {
            let graph = module_graph(&root);
            if let Some(cycle) = find_cycle(&graph) {
                circles.push(format!("{}: {cycle}", root.display()));
            }
        }
    }
    // The checker itself finds a circle when there is one.
    let mut sample = BTreeMap::new();
    sample.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    sample.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&sample).as_deref(), Some("a -> b -> a"));
    assert_eq!(
        crate_refs("use crate::{hub::Hub, ops, x::{y, z}};\nlet a = crate::daemon::D;"),
        BTreeSet::from(["daemon", "hub", "ops", "x"].map(String::from))
    );
    let core = module_graph(&crates_dir().join("core/src"));
    assert!(core["ops"].contains("orchestrator") && core["orchestrator"].contains("runners"));
    let dev = module_graph(&crates_dir().join("troupe/src/bin/troupe-dev"));
    assert!(dev["bench"].contains("bench_parties") && dev["bench_parties"].contains("harness"));
    assert!(circles.is_empty(), "module circles: {circles:?}");
}

#[test]
fn a_door_never_imports_another_door() {
    let doors = crates_dir().join("troupe/src/doors");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&doors).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name != "mod" {
            names.insert(name);
        }
    }
    assert!(names.contains("rpc") && names.contains("lsp") && names.contains("mcp"));
    let mut files = Vec::new();
    rust_files(&doors, &mut files);
    let mut offenders = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&doors).unwrap();
        let door = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let door = door.trim_end_matches(".rs");
        let Some(code) = production_code(&file) else {
            continue;
        };
        for other in names.iter().filter(|n| *n != door) {
            let depth = rel.components().count();
            let via_super = format!("{}{other}", "super::".repeat(depth - 1));
            if code.contains(&format!("doors::{other}")) || (depth > 1 && code.contains(&via_super))
            {
                offenders.push(format!("{} uses the {other} door", file.display()));
            }
        }
        // Nor the store: a door reaches the daemon's state through the core.
        if code.contains("troupe_store") {
            offenders.push(format!("{} uses the store", file.display()));
        }
        // Nor a runner: what a door shares with one (ACP's line transport) is the core's own.
        if code.contains("troupe_core::runners") {
            offenders.push(format!("{} uses a runner", file.display()));
        }
    }
    assert!(offenders.is_empty(), "{offenders:?}");
}

/// The `[dependencies]` of a crate (names only; optional ones included).
fn dependencies(dir: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(crates_dir().join(dir).join("Cargo.toml")).unwrap();
    let mut deps = BTreeSet::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap().trim();
            deps.insert(name.to_string());
        }
    }
    assert!(!deps.is_empty(), "{dir} has dependencies");
    deps
}

#[test]
fn each_layer_depends_only_on_what_it_may() {
    // The engine is pure: no IO, no runtime, no clock. It shares the records' statuses
    // (`troupe-model`, without its `sql` feature).
    let engine = dependencies("engine");
    let pure = [
        "petgraph",
        "schemars",
        "serde",
        "serde_json",
        "thiserror",
        "troupe-model",
    ];
    assert!(
        engine.iter().all(|d| pure.contains(&d.as_str())),
        "the engine may depend only on {pure:?}, not {engine:?}"
    );
    let engine_toml =
        std::fs::read_to_string(crates_dir().join("engine").join("Cargo.toml")).unwrap();
    assert!(
        !engine_toml.contains("sql"),
        "the engine takes troupe-model without its `sql` feature"
    );
    // The records and the API hold no IO: the store's and the plugin host's errors convert only
    // under the API's optional `daemon` feature, which only the core turns on.
    let model = dependencies("model");
    assert!(
        model
            .iter()
            .all(|d| ["rusqlite", "schemars", "serde", "serde_json"].contains(&d.as_str()))
    );
    let api = dependencies("api");
    let io = [
        "tokio",
        "rusqlite",
        "jsonrpsee",
        "tower-lsp-server",
        "rmcp",
        "axum",
        "hyper",
        "git2",
        "wasmtime",
        "troupe-core",
    ];
    assert!(
        api.iter().all(|d| !io.contains(&d.as_str())),
        "the API depends on an IO crate: {api:?}"
    );
    let api_toml = std::fs::read_to_string(crates_dir().join("api/Cargo.toml")).unwrap();
    for lower in ["troupe-store", "troupe-plugin-host"] {
        assert!(
            api_toml.contains(&format!(
                "{lower} = {{ workspace = true, optional = true }}"
            )),
            "the API's {lower} dependency must stay optional"
        );
    }
    // Only the doors (the `troupe` crate) know wire formats; the core drives ACP agents
    // through its runner's adapter only.
    let wire = [
        "jsonrpsee",
        "jsonrpsee-ws-client",
        "jsonrpsee-core",
        "tower-lsp-server",
        "rmcp",
        "axum",
        "hyper",
        "http",
        "async-nats",
    ];
    for dir in [
        "core",
        "api",
        "model",
        "store",
        "engine",
        "plugin-host",
        "worktree",
    ] {
        let deps = dependencies(dir);
        let found: Vec<_> = deps.iter().filter(|d| wire.contains(&d.as_str())).collect();
        // The plugin host serves plugins' outgoing HTTP (wasi-http), nothing else.
        if dir != "plugin-host" {
            assert!(found.is_empty(), "{dir} knows a wire format: {found:?}");
        }
    }
    let mut acp_users = Vec::new();
    let mut files = Vec::new();
    rust_files(&crates_dir().join("core/src"), &mut files);
    for file in files {
        if let Some(code) = production_code(&file)
            && code.contains("agent_client_protocol")
        {
            acp_users.push(
                file.strip_prefix(crates_dir())
                    .unwrap()
                    .display()
                    .to_string(),
            );
        }
    }
    acp_users.sort();
    assert_eq!(
        acp_users,
        [
            "core/src/runners/acp/adapter.rs",
            "core/src/runners/acp/adapter/elicit.rs"
        ],
        "ACP types stay behind the adapter"
    );
    // One crate per library: SQL in the store, git in the worktree crate, wasmtime in the
    // plugin host, the forge's API client in the forge crate.
    for dir in crate_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let deps = dependencies(&name);
        for (lib, owners) in [
            ("rusqlite", &["store", "model"][..]),
            ("git2", &["worktree"][..]),
            ("wasmtime", &["plugin-host"][..]),
            ("octocrab", &["forge"][..]),
        ] {
            assert!(
                !deps.contains(lib) || owners.contains(&name.as_str()),
                "{name} depends on {lib}"
            );
        }
    }
}

/// Runners know no parties and no daemon: what they need comes in their `Launch` and through
/// `RunnerHost`, never from the modules that hold parties, operations or the daemon.
#[test]
fn runners_know_no_parties_and_no_daemon() {
    let forbidden = [
        "daemon",
        "orchestrator",
        "party",
        "collab",
        "landing",
        "ops",
        "inbox",
        "radar",
        "rounds",
        "registry",
        "feeds",
        "boot",
    ];
    let runners = crates_dir().join("core/src/runners");
    let mut files = Vec::new();
    rust_files(&runners, &mut files);
    files.push(crates_dir().join("core/src/runners.rs"));
    let mut offenders = Vec::new();
    for file in files.iter().filter(|f| f.exists()) {
        let Some(code) = production_code(file) else {
            continue;
        };
        for module in crate_refs(&code) {
            if forbidden.contains(&module.as_str()) {
                offenders.push(format!("{} names crate::{module}", file.display()));
            }
        }
        if code.contains("troupe_store::Store") || code.contains("PartyRow") {
            offenders.push(format!("{} reaches the store's parties", file.display()));
        }
    }
    assert!(files.len() > 5, "found the runners: {files:?}");
    assert!(offenders.is_empty(), "{offenders:?}");
}

/// Product and tools are apart: benchmarks and the scripted ACP agent live in the `troupe-dev`
/// binary, which only the `dev` feature builds; the library, the `troupe` binary and the core
/// hold no benchmark module. (The store's floor and the plugin host's router timing stay in
/// their crates: they need SQLite and wasmtime, which only those crates may link.)
#[test]
fn product_and_tools_are_apart() {
    let manifest = std::fs::read_to_string(crates_dir().join("troupe/Cargo.toml")).unwrap();
    let dev_bin = manifest
        .split("[[bin]]")
        .find(|b| b.contains("name = \"troupe-dev\""))
        .expect("the troupe-dev binary is declared");
    assert!(
        dev_bin.contains("required-features = [\"dev\"]"),
        "troupe-dev is built only with the dev feature"
    );
    let mut offenders = Vec::new();
    for dir in crate_dirs() {
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for file in files {
            if file.components().any(|c| c.as_os_str() == "bin") {
                continue;
            }
            let name = file.file_stem().unwrap().to_string_lossy().to_string();
            let Some(code) = production_code(&file) else {
                continue;
            };
            if name.starts_with("bench") || code.contains("scripted_agent") {
                offenders.push(file.display().to_string());
            }
        }
    }
    let product = std::fs::read_to_string(crates_dir().join("troupe/src/main.rs")).unwrap();
    assert!(
        !product.contains("bench"),
        "the troupe binary has no benchmark"
    );
    assert!(
        offenders.is_empty(),
        "benchmark code outside troupe-dev: {offenders:?}"
    );
}

/// One module-file convention: a module with submodules is `foo.rs` beside `foo/`, never
/// `foo/mod.rs`.
#[test]
fn modules_are_files_beside_their_folders() {
    let mut mod_files = Vec::new();
    for dir in crate_dirs() {
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        mod_files.extend(
            files
                .into_iter()
                .filter(|f| f.file_name().is_some_and(|n| n == "mod.rs")),
        );
    }
    assert!(
        mod_files.is_empty(),
        "use foo.rs beside foo/: {mod_files:?}"
    );
}

/// The pending approvals, the notifications, the picks and the inbox learn of changes from one
/// place: the store announces the topics a commit changed (`troupe_store::Topic`, marked beside
/// the SQL or by the timeline event written). Outside the store, a change is announced by hand
/// only where the database does not hold it: a removed integration checkout.
#[test]
fn the_inbox_learns_of_changes_from_the_store() {
    let mut files = Vec::new();
    rust_files(&crates_dir(), &mut files);
    let mut announcing = Vec::new();
    for file in &files {
        let Some(code) = production_code(file) else {
            continue;
        };
        let shown = file
            .strip_prefix(crates_dir())
            .unwrap()
            .display()
            .to_string();
        if code.contains(".announce(troupe_store::Topic") || code.contains(".announce(Topic") {
            let removes_a_checkout = code.contains("remove_integration_of");
            if shown.starts_with("store/") || !removes_a_checkout {
                announcing.push(shown.clone());
            }
        }
        for gone in [
            "INBOX_KEY",
            "APPROVALS_KEY",
            "NOTIFICATIONS_KEY",
            "PICKS_KEY",
        ] {
            if code.contains(gone) {
                announcing.push(format!("{shown} keeps a hub counter {gone}"));
            }
        }
    }
    assert!(
        announcing.is_empty(),
        "announced outside the store's change feed: {announcing:?}"
    );
}
