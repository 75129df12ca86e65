//! `status`: what the topology's status, its members' status and the Events already say,
//! as tables. Pure: the caller reads the objects and gives the time.

use std::collections::BTreeMap;

use crd_types::ValkeyNode;
use crd_types::node::Role;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::patches::is_paused;
use crate::table::{age, bytes, render};
use crate::topology::Topology;

/// Everything `status` shows.
pub struct View<'a> {
    pub namespace: &'a str,
    pub topology: &'a Topology,
    pub nodes: &'a [ValkeyNode],
    pub events: &'a [Event],
    /// How many Events to show, latest last.
    pub last_events: usize,
    /// Unix seconds now.
    pub now: i64,
}

fn seconds(t: &Time) -> i64 {
    t.0.as_second()
}

fn role(role: Option<Role>) -> String {
    role.map(|r| format!("{r:?}")).unwrap_or_else(|| "-".into())
}

fn yes_no(b: bool) -> String {
    if b { "true" } else { "false" }.into()
}

/// What a member's ValkeyNode status says of its replication.
#[derive(Clone, Copy, Default)]
struct Replication {
    offset: Option<i64>,
    link_up: Option<bool>,
}

fn node_replication(nodes: &[ValkeyNode]) -> BTreeMap<String, Replication> {
    nodes
        .iter()
        .map(|n| {
            let valkey = n.status.as_ref().and_then(|s| s.valkey.as_ref());
            (
                n.name_any(),
                Replication {
                    offset: valkey.and_then(|v| v.replication_offset),
                    link_up: valkey.and_then(|v| v.link_up),
                },
            )
        })
        .collect()
}

/// LINK and LAG of a member: its link, and how far its offset is behind the primary's.
fn link_and_lag(role: Option<Role>, own: Replication, primary: Option<i64>) -> [String; 2] {
    match role {
        Some(Role::Replica) => [
            own.link_up
                .map(|up| if up { "up" } else { "down" }.to_string())
                .unwrap_or_else(|| "-".into()),
            match (primary, own.offset) {
                (Some(p), Some(o)) => (p - o).max(0).to_string(),
                _ => "-".into(),
            },
        ],
        Some(Role::Sentinel) => [
            match own.link_up {
                Some(true) => "monitoring".into(),
                Some(false) => "not monitoring".into(),
                None => "-".into(),
            },
            "-".into(),
        ],
        _ => ["-".into(), "-".into()],
    }
}

impl View<'_> {
    pub fn render(&self) -> String {
        [
            self.header(),
            self.members(),
            self.shards(),
            self.conditions(),
            self.certificates(),
            self.volumes(),
            self.events(),
        ]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
    }

    fn header(&self) -> String {
        let t = self.topology;
        let phase = t.phase().map(|p| p.as_str()).unwrap_or("Unknown");
        let mut out = format!(
            "{} {}/{}\nPhase: {phase}{}\n",
            t.kind().as_str(),
            self.namespace,
            t.name(),
            if is_paused(&t.annotations()) {
                "   (valkey.rs/paused is set: the operator takes no step)"
            } else {
                ""
            }
        );
        match t {
            Topology::Cluster(c) => {
                let s = c.status.clone().unwrap_or_default();
                out += &format!(
                    "Shards: {} ready of {}, {} replicas each   Slots assigned: {}/16384\n",
                    s.ready_shards, c.spec.shards, c.spec.replicas_per_shard, s.slots_assigned
                );
            }
            Topology::Replication(r) => {
                let s = r.status.clone().unwrap_or_default();
                out += &format!(
                    "Primary: {}   Data nodes: {} ready of {}   Sentinels: {} ready of {}\n",
                    s.current_primary.as_deref().unwrap_or("-"),
                    s.ready_replicas,
                    r.spec.replicas,
                    s.ready_sentinels,
                    r.spec.sentinel.replicas
                );
            }
        }
        let versions = match t {
            Topology::Cluster(c) => c.status.clone().unwrap_or_default().versions,
            Topology::Replication(r) => r.status.clone().unwrap_or_default().versions,
        };
        if !versions.is_empty() {
            out += &format!("Valkey versions: {}\n", versions.join(", "));
        }
        if let Some(s) = t.switchover() {
            out += &format!(
                "Switchover {}: {:?}{}\n",
                s.id,
                s.outcome,
                if s.message.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", s.message)
                }
            );
        }
        for r in t.password_rotations() {
            out += &format!(
                "Password rotation ({}): {} of {} members have the new one, previous until {}{}\n",
                r.user.as_str(),
                r.members_with_new,
                r.members,
                r.previous_until.0,
                if r.held_back_by.is_empty() {
                    String::new()
                } else {
                    format!(", held back by {}", r.held_back_by.join(", "))
                }
            );
        }
        out
    }

    fn members(&self) -> String {
        let replication = node_replication(self.nodes);
        let own = |name: &str| replication.get(name).copied().unwrap_or_default();
        let rows: Vec<Vec<String>>;
        let table = match self.topology {
            Topology::Cluster(c) => {
                let shards = c.status.clone().unwrap_or_default().shards;
                rows = shards
                    .iter()
                    .flat_map(|shard| {
                        let primary = shard.primary.as_deref().map(|p| own(p).offset);
                        let own = &own;
                        shard.members.iter().map(move |m| {
                            let is_primary = shard.primary.as_deref() == Some(m.name.as_str());
                            let [link, lag] = link_and_lag(m.role, own(&m.name), primary.flatten());
                            vec![
                                m.name.clone(),
                                role(m.role),
                                yes_no(m.ready),
                                shard.index.to_string(),
                                if is_primary {
                                    shard.slots.join(",")
                                } else {
                                    "-".into()
                                },
                                link,
                                lag,
                            ]
                        })
                    })
                    .collect();
                render(
                    &["NAME", "ROLE", "READY", "SHARD", "SLOTS", "LINK", "LAG"],
                    &rows,
                )
            }
            Topology::Replication(r) => {
                let s = r.status.clone().unwrap_or_default();
                let primary_offset = s
                    .members
                    .iter()
                    .find(|m| m.role == Some(Role::Primary))
                    .and_then(|m| m.replication_offset);
                rows = s
                    .members
                    .iter()
                    .map(|m| {
                        let here = Replication {
                            offset: m.replication_offset,
                            link_up: m.link_up,
                        };
                        let [link, lag] = link_and_lag(m.role, here, primary_offset);
                        vec![
                            m.name.clone(),
                            role(m.role),
                            yes_no(m.ready),
                            m.replication_offset
                                .map(|o| o.to_string())
                                .unwrap_or_else(|| "-".into()),
                            link,
                            lag,
                        ]
                    })
                    .collect();
                render(&["NAME", "ROLE", "READY", "OFFSET", "LINK", "LAG"], &rows)
            }
        };
        if rows.is_empty() {
            return "Members: none reported in status yet\n".into();
        }
        format!("Members:\n{table}")
    }

    fn shards(&self) -> String {
        let Topology::Cluster(c) = self.topology else {
            return String::new();
        };
        let shards = c.status.clone().unwrap_or_default().shards;
        if shards.is_empty() {
            return String::new();
        }
        let rows: Vec<Vec<String>> = shards
            .iter()
            .map(|s| {
                let ready = s.members.iter().filter(|m| m.ready).count();
                vec![
                    s.index.to_string(),
                    s.primary.clone().unwrap_or_else(|| "-".into()),
                    if s.slots.is_empty() {
                        "-".into()
                    } else {
                        s.slots.join(",")
                    },
                    format!("{ready}/{}", s.members.len()),
                ]
            })
            .collect();
        format!(
            "Shards:\n{}",
            render(&["SHARD", "PRIMARY", "SLOTS", "READY"], &rows)
        )
    }

    fn conditions(&self) -> String {
        let conditions = self.topology.conditions();
        if conditions.is_empty() {
            return "Conditions: none yet\n".into();
        }
        let rows: Vec<Vec<String>> = conditions
            .iter()
            .map(|c| {
                vec![
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    age(self.now - seconds(&c.last_transition_time)),
                    c.message.clone(),
                ]
            })
            .collect();
        format!(
            "Conditions:\n{}",
            render(&["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], &rows)
        )
    }

    fn certificates(&self) -> String {
        let t = self.topology;
        let name = t.name();
        let Some(tls) = t.common().tls.as_ref() else {
            return "Certificates: no TLS (spec.tls is not set)\n".into();
        };
        let mut out = String::from("Certificates:\n");
        out += &match &tls.secret_name {
            Some(secret) => format!(
                "  Members serve the certificate of Secret {secret} (yours to renew; the operator reloads it)\n"
            ),
            None => format!(
                "  The operator's CA: clients trust ca.crt of Secret {name}-ca; members' certificates are renewed before they expire\n"
            ),
        };
        out += &format!("  Client certificates: {:?}", tls.auth_clients);
        if tls.plain_text_clients {
            out += ", plain-text clients also on port 6380";
        }
        out += "\n";
        match t.ca_replacement() {
            Some(r) => {
                out += &format!("  CA replacement: {:?} since {}", r.phase, r.started.0);
                if let Some(until) = &r.clients_until {
                    out += &format!(", clients re-read {name}-ca until {}", until.0);
                }
                if let Some(waiting) = &r.waiting_for {
                    out += &format!(", waiting for {waiting}");
                }
                out += "\n";
            }
            None if tls.secret_name.is_none() => out += "  CA replacement: none under way\n",
            None => {}
        }
        out
    }

    fn volumes(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let s = n.status.as_ref()?.storage.as_ref()?;
                let dash = || "-".to_string();
                Some(vec![
                    n.name_any(),
                    s.claim_name.clone().unwrap_or_else(dash),
                    s.requested.clone().unwrap_or_else(dash),
                    s.capacity.clone().unwrap_or_else(dash),
                    s.used_bytes.map(bytes).unwrap_or_else(dash),
                    s.available_bytes.map(bytes).unwrap_or_else(dash),
                    s.state.map(|st| format!("{st:?}")).unwrap_or_else(dash),
                ])
            })
            .collect();
        let mut out = if rows.is_empty() {
            "Volumes: none reported (no persistence, or pvc-resizer has not written status)\n"
                .to_string()
        } else {
            format!(
                "Volumes:\n{}",
                render(
                    &[
                        "MEMBER",
                        "CLAIM",
                        "REQUESTED",
                        "CAPACITY",
                        "USED",
                        "AVAILABLE",
                        "STATE"
                    ],
                    &rows
                )
            )
        };
        if let Some(h) = self.topology.storage() {
            out += &format!(
                "Least headroom: {} with {} free{}\n",
                h.member,
                bytes(h.min_available_bytes),
                h.used_percent
                    .map(|p| format!(" ({p}% used)"))
                    .unwrap_or_default()
            );
        }
        out
    }

    fn events(&self) -> String {
        let mut events: Vec<(i64, &Event)> = self
            .events
            .iter()
            .map(|e| (event_time(e).unwrap_or(0), e))
            .collect();
        events.sort_by_key(|(t, _)| *t);
        let skip = events.len().saturating_sub(self.last_events);
        let rows: Vec<Vec<String>> = events[skip..]
            .iter()
            .map(|(t, e)| {
                vec![
                    if *t == 0 {
                        "-".into()
                    } else {
                        age(self.now - t)
                    },
                    e.type_.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                    format!(
                        "{}/{}",
                        e.involved_object
                            .kind
                            .clone()
                            .unwrap_or_default()
                            .to_lowercase(),
                        e.involved_object.name.clone().unwrap_or_default()
                    ),
                    e.message.clone().unwrap_or_default().replace('\n', " "),
                ]
            })
            .collect();
        if rows.is_empty() {
            return "Events: none\n".into();
        }
        format!(
            "Events:\n{}",
            render(&["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], &rows)
        )
    }
}

/// When an Event last happened (unix seconds), from whichever time it carries.
pub fn event_time(e: &Event) -> Option<i64> {
    e.last_timestamp
        .as_ref()
        .map(seconds)
        .or_else(|| e.event_time.as_ref().map(|t| t.0.as_second()))
        .or_else(|| e.first_timestamp.as_ref().map(seconds))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(seconds))
}

#[cfg(test)]
mod tests;
