//! Build script: links the functions the daemon runs at start and while serving side by side in
//! release builds (lld `--symbol-ordering-file` with `link/order.txt`, made by
//! `scripts/link-order`), so an idle daemon maps 4 MiB of its 43 MiB of code, not 16.5 MiB: a
//! 64 KiB fault-around window for each function it touched, scattered.
//!
//! Only where rustc links with its own lld by default (x86_64-unknown-linux-gnu since Rust 1.90)
//! and nobody chose another linker; `TROUPE_LINK_ORDER=0` turns it off. A name the list holds
//! that the build lacks (another toolchain, updated crates) is skipped: a stale list costs memory,
//! never a failed link.
//!
//! It also sets `cfg(troupe_test_tools)` when `TROUPE_TEST_TOOLS=1` (`scripts/test` and CI set
//! it, having installed the real editors, agent CLIs, nats-server and the rest): without it, the
//! integration tests that drive those tools are ignored, so a plain `cargo test` passes on a
//! machine that has only Rust and git.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(troupe_test_tools)");
    println!("cargo:rerun-if-env-changed=TROUPE_TEST_TOOLS");
    if env::var("TROUPE_TEST_TOOLS").is_ok_and(|v| v == "1") {
        println!("cargo:rustc-cfg=troupe_test_tools");
    }
    println!("cargo:rerun-if-changed=link/order.txt");
    println!("cargo:rerun-if-env-changed=TROUPE_LINK_ORDER");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let wanted = env::var("TROUPE_LINK_ORDER").map_or(true, |v| v != "0");
    let release = env::var("PROFILE").is_ok_and(|p| p == "release");
    let lld_by_default = env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    // `-C linker=…`, `-C linker-features=…`, `-C link-arg=-fuse-ld=…` or a configured
    // `target.<triple>.linker` may pick a linker without --symbol-ordering-file (GNU ld).
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let other_linker = env::var_os("RUSTC_LINKER").is_some()
        || flags.contains("linker")
        || flags.contains("fuse-ld");
    let order =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("link/order.txt");
    if wanted && release && lld_by_default && !other_linker && order.is_file() {
        println!(
            "cargo:rustc-link-arg-bin=troupe=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bin=troupe=-Wl,--no-warn-symbol-ordering");
    }
}
