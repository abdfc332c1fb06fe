//! Tidy checks that run with the tests: every source file says what it is in a `//!` line,
//! production code has no `unwrap()`, the code is rustfmt-clean, and released WIT versions
//! are frozen.

use std::path::{Path, PathBuf};

use crate::support::workspace_root;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') && name != "node_modules" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["sidecar", "tests", "plugins"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 10, "found the sources");
    files
}

#[test]
fn every_file_starts_with_a_doc_line() {
    let missing: Vec<_> = sources()
        .into_iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().starts_with("//!"))
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` line: {missing:?}"
    );
}

#[test]
fn no_unwrap_in_production_code() {
    let mut offenders = Vec::new();
    for file in sources() {
        if file
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "benches")
            || file.ends_with("tests.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests sit at the end of a file, after `#[cfg(test)]`.
        let production = text.split("#[cfg(test)]").next().unwrap();
        for (n, line) in production.lines().enumerate() {
            if line.contains(".unwrap()") && !line.trim_start().starts_with("//") {
                offenders.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "unwrap() in production code: {offenders:?}"
    );
}

#[test]
fn code_is_formatted() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["fmt", "--all", "--", "--check"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo fmt --check failed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A released WIT version is an ABI plugins were built against: never edit it, add a new
/// version folder instead (and keep the host loading the old one).
#[test]
fn released_wit_versions_are_frozen() {
    let released: &[(&str, &str)] = &[(
        "0.1.0",
        "c61c7f02544d07f51e50312789950d8443771b7a22d1537669e637e7da5e14ec",
    )];
    for (version, sha) in released {
        let path = workspace_root().join(format!("wit/v{version}/plugin.wit"));
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            troupe_plugin_host::sha256_hex(&bytes),
            *sha,
            "{} changed: released WIT versions are frozen; add wit/v<next>/ instead",
            path.display()
        );
        assert!(
            troupe_plugin_host::SUPPORTED_WIT.contains(version),
            "the host no longer loads released WIT {version}"
        );
    }
    let folders = std::fs::read_dir(workspace_root().join("wit"))
        .unwrap()
        .count();
    assert_eq!(
        folders,
        released.len(),
        "every WIT folder is a released, frozen version"
    );
}
