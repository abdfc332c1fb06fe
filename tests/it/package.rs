//! What ships: `scripts/package` makes the release tarball (the binary without its debug info,
//! which is split beside it and still found by its link; the VS Code extension, the Neovim
//! plugin, completions, the man page, install.sh); installed from it into a scratch prefix and
//! home, `troupe doctor` finds the editors' pieces it put there and `troupe demo` runs.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{BIN, workspace_root};

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The sections of an ELF file, as `objdump -h` names them.
fn sections(file: &Path) -> String {
    text(&run(Command::new("objdump").arg("-h").arg(file)))
}

#[test]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
fn the_tarball_installs_into_a_prefix_and_runs_the_doctor_and_the_demo() {
    let root = workspace_root();
    assert!(
        root.join("editors/vscode/troupe.vsix").is_file(),
        "editors/vscode/troupe.vsix is missing: run scripts/test (it packages the extension)"
    );
    let dir = tempfile::Builder::new()
        .prefix("troupe-pkg-")
        .tempdir()
        .unwrap();
    let dir = dir.path();
    let out = run(Command::new(root.join("scripts/package"))
        .args(["--binary", BIN, "--out"])
        .arg(dir.join("out")));
    let tarball = text(&out).trim().to_string();
    let name = Path::new(&tarball)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_end_matches(".tar.gz")
        .to_string();
    assert!(name.starts_with("troupe-0."), "{name}");
    run(Command::new("tar").args(["-xzf", &tarball, "-C"]).arg(dir));
    let unpacked = dir.join(&name);
    for piece in [
        "bin/troupe",
        "lib/troupe/troupe.debug",
        "share/troupe/troupe.vsix",
        "share/troupe/nvim/lua/troupe/init.lua",
        "share/man/man1/troupe.1",
        "share/bash-completion/completions/troupe",
        "share/zsh/site-functions/_troupe",
        "share/fish/vendor_completions.d/troupe.fish",
        "install.sh",
    ] {
        assert!(unpacked.join(piece).is_file(), "{piece} is in the tarball");
    }
    // The binary has no debug info, but says where it is; the split file has it.
    let shipped = sections(&unpacked.join("bin/troupe"));
    assert!(!shipped.contains(".debug_line"), "{shipped}");
    assert!(shipped.contains(".gnu_debuglink"), "{shipped}");
    assert!(sections(&unpacked.join("lib/troupe/troupe.debug")).contains(".debug_line"));
    assert!(
        std::fs::metadata(unpacked.join("bin/troupe"))
            .unwrap()
            .len()
            < std::fs::metadata(BIN).unwrap().len(),
        "stripped is smaller"
    );

    // Installed into a scratch prefix, for a scratch home, with no VS Code on PATH.
    let prefix = dir.join("prefix");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Neovim (when the tests have one) on PATH, so the doctor looks for the plugin.
    let mut path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        prefix.join("bin").display()
    );
    if let Some(nvim) = std::env::var_os("TROUPE_TEST_NVIM") {
        let nvim_dir = Path::new(&nvim).parent().unwrap().display().to_string();
        path = format!("{path}:{nvim_dir}");
    }
    let env = |cmd: &mut Command| {
        cmd.env_clear()
            .env("HOME", &home)
            .env("PATH", &path)
            .env("TROUPE_RUNTIME_DIR", dir.join("run"))
            .env("TROUPE_LOG", "warn");
    };
    let mut install = Command::new(unpacked.join("install.sh"));
    install.arg("--prefix").arg(&prefix);
    env(&mut install);
    let said = text(&run(&mut install));
    assert!(
        said.contains(&format!("installed {}/bin/troupe", prefix.display())),
        "{said}"
    );
    assert!(said.contains("installed the Neovim plugin in"), "{said}");
    assert!(said.contains("no `code` on PATH"), "{said}");
    let plugin = home.join(".local/share/nvim/site/pack/troupe/start/troupe");
    assert!(plugin.join("lua/troupe/init.lua").is_file());
    assert!(prefix.join("share/man/man1/troupe.1").is_file());
    assert!(prefix.join("bin/.debug/troupe.debug").exists());

    // The installed troupe: its doctor, and its demo.
    let troupe = prefix.join("bin/troupe");
    let mut doctor = Command::new(&troupe);
    doctor
        .args(["--data-dir"])
        .arg(dir.join("data"))
        .args(["doctor", "--json"]);
    env(&mut doctor);
    let report = doctor.output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}",
            String::from_utf8_lossy(&report.stdout)
        )
    });
    let checks = report["checks"].as_array().expect("checks");
    let check = |what: &str| {
        checks
            .iter()
            .find(|c| c["what"] == what)
            .unwrap_or_else(|| panic!("no {what} check: {report:#}"))
            .clone()
    };
    assert_eq!(check("git")["ok"], true, "{report:#}");
    let nvim = check("Neovim plugin");
    if std::env::var_os("TROUPE_TEST_NVIM").is_some() {
        assert_eq!(nvim["ok"], true, "{report:#}");
        assert!(
            nvim["note"]
                .as_str()
                .unwrap()
                .contains(&plugin.display().to_string()),
            "{report:#}"
        );
    }
    let mut demo = Command::new(&troupe);
    demo.arg("demo").current_dir(dir);
    env(&mut demo);
    let shown = text(&run(&mut demo));
    assert!(shown.contains("party"), "{shown}");
}
