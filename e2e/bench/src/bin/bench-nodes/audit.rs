//! The API server's audit log, as much of each event as the benchmark uses.

use std::io::BufRead;
use std::path::Path;

use anyhow::Result;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    pub(crate) stage: String,
    pub(crate) verb: String,
    #[serde(rename = "requestURI")]
    pub(crate) request_uri: String,
    pub(crate) user: RawUser,
    #[serde(default)]
    pub(crate) object_ref: Option<RawObjectRef>,
    #[serde(default)]
    pub(crate) response_status: Option<RawStatus>,
    pub(crate) request_received_timestamp: String,
    pub(crate) stage_timestamp: String,
}

#[derive(Deserialize)]
struct RawUser {
    pub(crate) username: String,
}

#[derive(Deserialize, Default)]
struct RawObjectRef {
    pub(crate) resource: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
}

#[derive(Deserialize)]
struct RawStatus {
    pub(crate) code: Option<u16>,
}

/// One audit event, as much of it as the benchmark uses.
pub(crate) struct AuditEvent {
    pub(crate) stage: String,
    pub(crate) verb: String,
    pub(crate) uri: String,
    pub(crate) user: String,
    pub(crate) resource: String,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
    pub(crate) code: u16,
    pub(crate) received: Timestamp,
    pub(crate) at: Timestamp,
}

impl AuditEvent {
    pub(crate) fn completed(&self) -> bool {
        self.stage == "ResponseComplete" && self.code < 300
    }

    /// `resource` or `resource/subresource`.
    pub(crate) fn what(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }

    /// The ValkeyNode the request is about: by object name (`<node>`, `<node>-config`,
    /// `<node>-data`, pod `<node>-0`) or by a `valkey.rs/node=<node>` label selector.
    pub(crate) fn node(&self) -> Option<String> {
        if let Some(name) = &self.name {
            let suffix = match self.resource.as_str() {
                "configmaps" => "-config",
                "persistentvolumeclaims" => "-data",
                "pods" => "-0",
                _ => "",
            };
            return Some(name.strip_suffix(suffix).unwrap_or(name).to_string());
        }
        let selector = self.uri.split_once("labelSelector=")?.1;
        let selector = selector.split('&').next()?.replace("%2F", "/");
        let value = selector.strip_prefix("valkey.rs/node%3D")?;
        Some(value.to_string())
    }
}

pub(crate) fn read_audit(path: &Path) -> Result<Vec<AuditEvent>> {
    let file = std::fs::File::open(path)?;
    let mut events = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        // The last line may be cut short by the API server's shutdown.
        let Ok(raw) = serde_json::from_str::<RawEvent>(&line) else {
            continue;
        };
        let object = raw.object_ref.unwrap_or_default();
        events.push(AuditEvent {
            stage: raw.stage,
            verb: raw.verb,
            uri: raw.request_uri,
            user: raw.user.username,
            resource: object.resource.unwrap_or_default(),
            name: object.name,
            subresource: object.subresource,
            code: raw.response_status.and_then(|s| s.code).unwrap_or(0),
            received: raw.request_received_timestamp.parse()?,
            at: raw.stage_timestamp.parse()?,
        });
    }
    Ok(events)
}
