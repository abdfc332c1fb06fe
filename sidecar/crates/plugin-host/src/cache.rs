//! Compiled components on disk, keyed by the wasm's SHA-256 and the engine's compatibility
//! hash, so a plugin compiles once per wasmtime build and later loads in well under a
//! millisecond. The cache directory is private to the daemon's user.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Compiled,
    Cache,
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn engine_key(engine: &Engine) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    h.finish()
}

fn entry(dir: &Path, engine: &Engine, sha: &str) -> PathBuf {
    dir.join(format!("{sha}-{:016x}.cwasm", engine_key(engine)))
}

/// Loads the component for `bytes` (whose hash is `sha`) from the cache, or compiles it and
/// stores the result. A corrupt or stale entry is recompiled and replaced.
pub(crate) fn load(
    engine: &Engine,
    dir: Option<&Path>,
    sha: &str,
    bytes: &[u8],
) -> wasmtime::Result<(Component, Source)> {
    let Some(dir) = dir else {
        return Ok((Component::new(engine, bytes)?, Source::Compiled));
    };
    let path = entry(dir, engine, sha);
    if path.exists() {
        match deserialize(engine, &path) {
            Ok(c) => return Ok((c, Source::Cache)),
            Err(e) => {
                tracing::warn!(path = %path.display(), "recompiling a bad cache entry: {e:#}")
            }
        }
    }
    let component = Component::new(engine, bytes)?;
    if let Err(e) = store(dir, &path, &component) {
        tracing::warn!(path = %path.display(), "cannot cache a compiled plugin: {e:#}");
    }
    Ok((component, Source::Compiled))
}

fn store(dir: &Path, path: &Path, component: &Component) -> wasmtime::Result<()> {
    std::fs::create_dir_all(dir)?;
    crate::set_private_dir(dir)?;
    let bytes = component.serialize()?;
    crate::write_private(path, &bytes)?;
    Ok(())
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires the file to be one `Component::serialize` wrote for a
    // compatible engine. Only this module writes into the cache directory, which is created
    // 0700 inside the daemon's private data dir, and entries are named by the wasm's hash and
    // the engine's compatibility hash; wasmtime also checks the header and version itself.
    unsafe { Component::deserialize_file(engine, path) }
}
