//! The daemon's plugins: the plugin host (created on first use), the plugins folder
//! (`<data>/plugins/<name>/` holding `plugin.toml` and the component), the user's grants
//! (`<data>/plugins/grants.toml`), hot reload when either changes, and install/remove. The
//! sandbox itself is `troupe-plugin-host`; this module only decides what is loaded. An install
//! is staged and replaces the old version only if the new one loads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use troupe_plugin_host::{Grants, HostOptions, Manifest, Plugin, PluginGrant, PluginHost};

use troupe_api::ApiError;
use troupe_api::layout::Layout;

/// The plugins of one daemon.
pub struct Plugins {
    root: PathBuf,
    cache_dir: PathBuf,
    host: OnceLock<PluginHost>,
    /// Serialises host creation, loads, installs and removals.
    lock: Mutex<()>,
    /// Plugin folders that failed to load, with why.
    broken: Mutex<BTreeMap<String, String>>,
    watcher: Mutex<Option<notify::RecommendedWatcher>>,
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugins")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Plugins {
    pub fn new(layout: &Layout) -> Arc<Plugins> {
        Arc::new(Plugins {
            root: layout.data_dir.join("plugins"),
            cache_dir: layout.data_dir.join("plugin-cache"),
            host: OnceLock::new(),
            lock: Mutex::new(()),
            broken: Mutex::new(BTreeMap::new()),
            watcher: Mutex::new(None),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn grants_path(&self) -> PathBuf {
        self.root.join("grants.toml")
    }

    /// The host, created (and every installed plugin loaded) on first use.
    pub fn host(&self) -> Result<&PluginHost, ApiError> {
        if let Some(h) = self.host.get() {
            return Ok(h);
        }
        let _guard = lock(&self.lock);
        if let Some(h) = self.host.get() {
            return Ok(h);
        }
        let host = PluginHost::new(HostOptions {
            cache_dir: Some(self.cache_dir.clone()),
            ..Default::default()
        })?;
        // Loaded before it is published, so no caller sees a host without its plugins.
        self.reload_locked(&host);
        let _ = self.host.set(host);
        self.host
            .get()
            .ok_or_else(|| ApiError::Internal("plugin host not initialised".into()))
    }

    /// Whether any plugin folder exists (so start-up can skip building the engine).
    pub fn any_installed(&self) -> bool {
        std::fs::read_dir(&self.root)
            .map(|mut d| d.any(|e| e.is_ok_and(|e| e.path().join("plugin.toml").exists())))
            .unwrap_or(false)
    }

    /// Re-reads the grants and every plugin folder.
    pub fn reload(&self) {
        let Some(host) = self.host.get() else {
            return;
        };
        let _guard = lock(&self.lock);
        self.reload_locked(host);
    }

    fn reload_locked(&self, host: &PluginHost) {
        match Grants::read(&self.grants_path()) {
            Ok(g) => host.set_grants(g),
            Err(e) => tracing::warn!("{e}; keeping the previous grants"),
        }
        let mut broken = BTreeMap::new();
        let mut present = Vec::new();
        for dir in plugin_dirs(&self.root) {
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            // Unchanged plugins are not reloaded.
            if let Some(p) = host.get(&name)
                && p.dir == dir
                && unchanged(p.as_ref())
            {
                present.push(name);
                continue;
            }
            match host.load_named(&dir, Some(&name)) {
                Ok(_) => present.push(name),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), "plugin not loaded: {e}");
                    broken.insert(name.clone(), e.to_string());
                    // A version loaded earlier stays (e.g. while a new one is being copied in).
                    if host.get(&name).is_some() {
                        present.push(name);
                    }
                }
            }
        }
        for p in host.list() {
            if !present.contains(&p.manifest.name) {
                host.unload(&p.manifest.name);
            }
        }
        *lock(&self.broken) = broken;
    }

    pub fn broken(&self) -> BTreeMap<String, String> {
        lock(&self.broken).clone()
    }

    /// Watches the plugins folder; changes reload it (debounced).
    pub fn watch(self: &Arc<Self>) {
        if let Err(e) = std::fs::create_dir_all(&self.root) {
            tracing::warn!(dir = %self.root.display(), "cannot create the plugins folder: {e}");
            return;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| !e.kind.is_access()) {
                let _closed = tx.send(());
            }
        });
        let mut watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("plugin hot reload is off: {e}");
                return;
            }
        };
        use notify::Watcher;
        if let Err(e) = watcher.watch(&self.root, notify::RecursiveMode::Recursive) {
            tracing::warn!("plugin hot reload is off: {e}");
            return;
        }
        *lock(&self.watcher) = Some(watcher);
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                // Let a copy finish: wait until the folder has been quiet for 100 ms.
                while tokio::time::timeout(Duration::from_millis(100), rx.recv())
                    .await
                    .is_ok_and(|r| r.is_some())
                {}
                let Some(plugins) = me.upgrade() else { break };
                let _ = tokio::task::spawn_blocking(move || plugins.reload()).await;
            }
        });
    }

    /// Copies the plugin in `src` (its `plugin.toml` and component) into the plugins folder
    /// and loads it, replacing an earlier version. Nothing is replaced unless it loads.
    pub fn install(&self, src: &Path) -> Result<Arc<Plugin>, ApiError> {
        let host = self.host()?;
        let _guard = lock(&self.lock);
        let manifest = Manifest::read(src)?;
        let file = manifest.component_file();
        std::fs::create_dir_all(&self.root).map_err(io_err)?;
        let staging = self.root.join(format!(".staging-{}", manifest.name));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).map_err(io_err)?;
        let copied = std::fs::copy(src.join("plugin.toml"), staging.join("plugin.toml"))
            .and_then(|_| std::fs::copy(src.join(&file), staging.join(&file)));
        if let Err(e) = copied {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(ApiError::Plugin(format!(
                "cannot copy plugin {} from {}: {e}",
                manifest.label(),
                src.display()
            )));
        }
        // Validate in the staging folder, under the real name.
        if let Err(e) = host.load(&staging) {
            let _ = std::fs::remove_dir_all(&staging);
            // The previous version (if any) stays loaded from its own folder.
            let final_dir = self.root.join(&manifest.name);
            if final_dir.exists() {
                let _ = host.load(&final_dir);
            } else {
                host.unload(&manifest.name);
            }
            return Err(e.into());
        }
        let final_dir = self.root.join(&manifest.name);
        let old = self.root.join(format!(".old-{}", manifest.name));
        let _ = std::fs::remove_dir_all(&old);
        if final_dir.exists() {
            std::fs::rename(&final_dir, &old).map_err(io_err)?;
        }
        std::fs::rename(&staging, &final_dir).map_err(io_err)?;
        let _ = std::fs::remove_dir_all(&old);
        let plugin = host.load(&final_dir)?;
        lock(&self.broken).remove(&manifest.name);
        Ok(plugin)
    }

    /// Unloads a plugin and deletes its folder.
    pub fn remove(&self, name: &str) -> Result<bool, ApiError> {
        let host = self.host()?;
        let _guard = lock(&self.lock);
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(ApiError::invalid("remove_plugin", "not a plugin name"));
        }
        let dir = self.root.join(name);
        let had = host.unload(name) | dir.exists();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io_err)?;
        }
        lock(&self.broken).remove(name);
        Ok(had)
    }

    /// Applies `change` to a plugin's grant and saves the grants file.
    pub fn grant(
        &self,
        name: &str,
        change: impl FnOnce(&mut PluginGrant) -> Result<(), String>,
    ) -> Result<PluginGrant, ApiError> {
        let host = self.host()?;
        let _guard = lock(&self.lock);
        let path = self.grants_path();
        let mut grants = Grants::read(&path)?;
        let entry = grants.plugins.entry(name.to_string()).or_default();
        change(entry).map_err(|e| ApiError::invalid("grant_plugin", e))?;
        for o in &entry.allow_http {
            troupe_plugin_host::grants::Origin::parse(o)
                .map_err(|e| ApiError::invalid("grant_plugin", e))?;
        }
        let granted = entry.clone();
        std::fs::create_dir_all(&self.root).map_err(io_err)?;
        grants.write(&path)?;
        host.set_grants(grants);
        Ok(granted)
    }
}

fn io_err(e: std::io::Error) -> ApiError {
    ApiError::Internal(e.to_string())
}

/// `root/<name>/` folders with a manifest (dot folders are staging areas).
fn plugin_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join("plugin.toml").exists())
        .collect();
    dirs.sort();
    dirs
}

/// Whether a loaded plugin's component is still the bytes it was loaded from.
fn unchanged(p: &Plugin) -> bool {
    let file = p.dir.join(p.manifest.component_file());
    let manifest_same = Manifest::read(&p.dir).is_ok_and(|m| m == p.manifest);
    manifest_same
        && std::fs::read(&file).is_ok_and(|b| troupe_plugin_host::sha256_hex(&b) == p.sha256)
}
