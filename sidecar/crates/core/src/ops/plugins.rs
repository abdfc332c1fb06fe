//! Plugin operations: list, install, remove, inspect and grant plugins, and `route_request`
//! (ask a router plugin which agent should take a request). The loading and the sandbox are
//! `crate::plugins` and `troupe-plugin-host`.

use std::path::PathBuf;

use troupe_engine::AgentDefinition;
use troupe_plugin_host::{CallContext, Candidate, Plugin, SUPPORTED_WIT, Source};
use troupe_store::DefinitionKind;

use crate::daemon::Daemon;
use troupe_api::ApiError;
use troupe_api::types::*;

fn info(d: &Daemon, p: &Plugin) -> PluginInfo {
    let grant = d
        .plugins
        .host()
        .ok()
        .and_then(|h| h.grants().plugins.get(&p.manifest.name).cloned())
        .unwrap_or_default();
    PluginInfo {
        name: p.manifest.name.clone(),
        version: p.manifest.version.clone(),
        kind: p.manifest.kind.as_str().into(),
        wit: p.manifest.wit.clone(),
        description: p.manifest.description.clone(),
        dir: p.dir.display().to_string(),
        sha256: p.sha256.clone(),
        http_hosts: p
            .manifest
            .http
            .as_ref()
            .map(|h| h.hosts.clone())
            .unwrap_or_default(),
        config: p.manifest.config.clone(),
        config_schema: p.manifest.config_schema.clone(),
        grant: serde_json::to_value(grant).unwrap_or_default(),
        loaded_from: match p.source {
            Source::Compiled => "compiled".into(),
            Source::Cache => "cache".into(),
        },
        load_ms: p.load_ms,
    }
}

/// Runs blocking plugin work (compiles, file copies) off the async workers.
async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
}

pub async fn list_plugins(
    d: &std::sync::Arc<Daemon>,
    _: NoParams,
) -> Result<PluginsResult, ApiError> {
    let d2 = d.clone();
    blocking(move || {
        let host = d2.plugins.host()?;
        Ok(PluginsResult {
            plugins: host.list().iter().map(|p| info(&d2, p)).collect(),
            broken: d2
                .plugins
                .broken()
                .into_iter()
                .map(|(dir, error)| BrokenPlugin { dir, error })
                .collect(),
            supported_wit: SUPPORTED_WIT.iter().map(|s| s.to_string()).collect(),
            plugins_dir: d2.plugins.root().display().to_string(),
        })
    })
    .await
}

pub async fn install_plugin(
    d: &std::sync::Arc<Daemon>,
    p: InstallPluginParams,
) -> Result<PluginResult, ApiError> {
    let mut path = PathBuf::from(&p.path);
    if path.is_relative() {
        match &p.cwd {
            Some(cwd) => path = PathBuf::from(cwd).join(path),
            None => {
                return Err(ApiError::invalid(
                    "install_plugin",
                    "path must be absolute (or give cwd)",
                ));
            }
        }
    }
    if !path.join("plugin.toml").is_file() {
        return Err(ApiError::invalid(
            "install_plugin",
            format!("{} holds no plugin.toml", path.display()),
        ));
    }
    let d2 = d.clone();
    blocking(move || {
        let plugin = d2.plugins.install(&path)?;
        Ok(PluginResult {
            plugin: info(&d2, &plugin),
        })
    })
    .await
}

pub async fn remove_plugin(
    d: &std::sync::Arc<Daemon>,
    p: NameParams,
) -> Result<RemovePluginResult, ApiError> {
    let d2 = d.clone();
    let name = p.name.clone();
    let removed = blocking(move || d2.plugins.remove(&name)).await?;
    if !removed {
        return Err(ApiError::NotFound {
            what: "plugin".into(),
            id: p.name,
        });
    }
    Ok(RemovePluginResult {
        name: p.name,
        removed,
    })
}

pub async fn get_plugin(
    d: &std::sync::Arc<Daemon>,
    p: NameParams,
) -> Result<PluginResult, ApiError> {
    let d2 = d.clone();
    blocking(move || {
        let host = d2.plugins.host()?;
        match host.get(&p.name) {
            Some(plugin) => Ok(PluginResult {
                plugin: info(&d2, &plugin),
            }),
            None => match d2.plugins.broken().get(&p.name) {
                Some(why) => Err(ApiError::Plugin(why.clone())),
                None => Err(ApiError::NotFound {
                    what: "plugin".into(),
                    id: p.name,
                }),
            },
        }
    })
    .await
}

pub async fn grant_plugin(
    d: &std::sync::Arc<Daemon>,
    p: GrantPluginParams,
) -> Result<PluginResult, ApiError> {
    let d2 = d.clone();
    blocking(move || {
        let name = p.name.clone();
        d2.plugins.grant(&name, |g| {
            if let Some(v) = p.allow_http {
                g.allow_http = v;
            }
            if let Some(v) = p.allow_private {
                g.allow_private = v;
            }
            if let Some(v) = p.key_env {
                g.key_env = (!v.is_empty()).then_some(v);
            }
            if let Some(v) = p.config {
                if !v.is_object() && !v.is_null() {
                    return Err("config must be a JSON object".into());
                }
                g.config = (!v.is_null()).then_some(v);
            }
            if let Some(v) = p.memory_mib {
                g.memory_mib = Some(v);
            }
            if let Some(v) = p.call_timeout_ms {
                g.call_timeout_ms = Some(v);
            }
            if let Some(v) = p.max_requests {
                g.max_requests = Some(v);
            }
            if let Some(v) = p.max_response_bytes {
                g.max_response_bytes = Some(v);
            }
            Ok(())
        })?;
        let host = d2.plugins.host()?;
        let plugin = host.get(&name).ok_or_else(|| ApiError::NotFound {
            what: "plugin".into(),
            id: name.clone(),
        })?;
        Ok(PluginResult {
            plugin: info(&d2, &plugin),
        })
    })
    .await
}

pub async fn route_request(
    d: &std::sync::Arc<Daemon>,
    p: RouteRequestParams,
) -> Result<RouteResult, ApiError> {
    let candidates: Vec<Candidate> = match p.candidates {
        Some(c) => c
            .into_iter()
            .map(|c| Candidate {
                name: c.name,
                description: c.description,
                capabilities: c.capabilities,
            })
            .collect(),
        None => d
            .store
            .list_definitions(DefinitionKind::Agent)?
            .into_iter()
            .filter_map(|row| serde_json::from_value::<AgentDefinition>(row.definition).ok())
            .map(|a| Candidate {
                name: a.name,
                description: a.description.unwrap_or_default(),
                capabilities: a.capabilities,
            })
            .collect(),
    };
    let host = {
        let d2 = d.clone();
        blocking(move || d2.plugins.host().cloned()).await?
    };
    let choice = host
        .route(
            &p.router,
            p.request,
            p.metadata.into_iter().collect(),
            candidates,
            &CallContext::default(),
        )
        .await?;
    Ok(RouteResult {
        agent: choice.agent,
        reason: choice.reason,
        router: p.router,
    })
}
