//! What the user grants plugins (`<data>/plugins/grants.toml`): HTTP origins, where the
//! provider key comes from, config values, limits. A plugin's manifest only asks; a request
//! goes out only when the manifest asks for the host AND the user granted the origin.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::PluginError;

/// The whole `plugins.toml`: one table per plugin name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginGrant>,
}

/// What one plugin is granted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginGrant {
    /// Origins it may reach: `api.openai.com` (https, 443), `https://host:port`, or
    /// `http://127.0.0.1:8080` (plain http only for local hosts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_http: Vec<String>,
    /// Let granted host names resolve to private, loopback or link-local addresses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_private: bool,
    /// The daemon's environment variable holding the provider key, sent in the manifest's
    /// `key_header` on requests to granted origins. The guest never sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// Config values over the manifest's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// Memory cap per instance (default 64 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
    /// Wall-clock limit of a router or recovery call (default 1000 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout_ms: Option<u64>,
    /// HTTP requests per executor run (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    /// Response bytes per executor run (default 64 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
}

impl Grants {
    /// Reads `path`; a missing file grants nothing.
    pub fn read(path: &Path) -> Result<Grants, PluginError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Grants::default()),
            Err(e) => {
                return Err(PluginError::Grants {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                });
            }
        };
        let g: Grants = toml::from_str(&text).map_err(|e| PluginError::Grants {
            path: path.display().to_string(),
            reason: e.to_string().trim().to_string(),
        })?;
        for (name, p) in &g.plugins {
            for o in &p.allow_http {
                Origin::parse(o).map_err(|reason| PluginError::Grants {
                    path: path.display().to_string(),
                    reason: format!("plugins.{name}.allow_http: {reason}"),
                })?;
            }
        }
        Ok(g)
    }

    /// Writes `path` (0600, atomically).
    pub fn write(&self, path: &Path) -> Result<(), PluginError> {
        let text = toml::to_string(self).map_err(|e| PluginError::Grants {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        crate::write_private(path, text.as_bytes()).map_err(|e| PluginError::Grants {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }
}

/// A granted origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub https: bool,
    pub host: String,
    pub port: u16,
}

impl Origin {
    pub fn parse(s: &str) -> Result<Origin, String> {
        let (https, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else {
            (true, s)
        };
        let rest = rest.trim_end_matches('/');
        if rest.contains('/') || rest.contains('@') || rest.is_empty() {
            return Err(format!("{s:?} is not an origin (scheme://host[:port])"));
        }
        let (host, port) = split_host_port(rest)
            .ok_or_else(|| format!("{s:?} is not an origin (scheme://host[:port])"))?;
        let port = port.unwrap_or(if https { 443 } else { 80 });
        if !crate::manifest::valid_host(&host) {
            return Err(format!("{s:?}: {host:?} is not a host name"));
        }
        if !https && !is_local_host(&host) {
            return Err(format!(
                "{s:?}: plain http is allowed only for local hosts; use https"
            ));
        }
        Ok(Origin {
            https,
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    pub fn matches(&self, https: bool, host: &str, port: u16) -> bool {
        self.https == https && self.host.eq_ignore_ascii_case(host) && self.port == port
    }
}

/// Splits `host[:port]` (IPv6 in brackets).
pub(crate) fn split_host_port(s: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((h.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), Some(p.parse().ok()?))),
        None => Some((s.to_string(), None)),
    }
}

/// `localhost` or a loopback, private or link-local address literal.
pub fn is_local_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .map(|ip| is_private(&ip))
            .unwrap_or(false)
}

/// Loopback, private, link-local, unique-local, unspecified or CGNAT.
pub fn is_private(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || o[0] == 0
                || o[0] >= 240
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xff00) == 0xff00
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| is_private(&IpAddr::V4(v4)))
                // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) embed an IPv4 address.
                || (s[0] == 0x64
                    && s[1] == 0xff9b
                    && s[2..6] == [0, 0, 0, 0]
                    && is_private(&IpAddr::V4(embedded_v4(s[6], s[7]))))
                || (s[0] == 0x2002 && is_private(&IpAddr::V4(embedded_v4(s[1], s[2]))))
        }
    }
}

fn embedded_v4(hi: u16, lo: u16) -> std::net::Ipv4Addr {
    let [a, b] = hi.to_be_bytes();
    let [c, d] = lo.to_be_bytes();
    std::net::Ipv4Addr::new(a, b, c, d)
}
