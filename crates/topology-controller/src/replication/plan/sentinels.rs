//! Rules on the sentinels: each monitors the primary with the spec's options, a stale one
//! monitors afresh, one listing departed members is reset; nothing moves while one fails
//! over. Also which sentinel can run a hand-over.

use crd_types::conditions::reasons::Waiting;

use super::Step;
use crate::replication::PORT;
use crate::replication::model::{DataNode, Group, Members, Peer};

/// While a sentinel runs a failover (it reconfigures the replicas one by one, until each
/// follows the promoted one or counts down), nothing else changes: a reset or another
/// hand-over in the middle would leave it behind.
pub(super) fn failover_running(members: &Members) -> Option<Step> {
    // Every sentinel, wanted or leaving: one the spec removes still votes and may lead.
    let busy = members
        .sentinels
        .iter()
        .find(|s| s.monitored().is_some_and(|m| m.failing_over()))?;
    Some(Step::wait(
        Waiting::SentinelsCatchingUp,
        format!("{} runs a failover", busy.name()),
    ))
}

/// `SENTINEL MONITOR` on the first wanted sentinel that does not monitor the group, then
/// `SENTINEL SET` where its options differ from the spec.
pub(super) fn monitor(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    let wanted = members
        .sentinels
        .iter()
        .filter(|s| group.wants(s.facts.at) && s.answer.is_some());
    for s in wanted {
        match s.monitored() {
            None => {
                return Some(Step::Monitor {
                    sentinel: s.name().to_string(),
                    primary: p.name().to_string(),
                    ip: ip.to_string(),
                });
            }
            Some(m) => {
                let options = group.options.differing(&m.options);
                if !options.is_empty() {
                    return Some(Step::Configure {
                        sentinel: s.name().to_string(),
                        options,
                    });
                }
            }
        }
    }
    None
}

/// A wanted sentinel that names another address than the primary `p` (at `ip`), which the
/// majority names and which serves: it monitors `p` afresh.
pub(super) fn remonitor(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    let stale = members
        .sentinels
        .iter()
        .filter(|s| group.wants(s.facts.at))
        .find(|s| {
            s.monitored()
                .is_some_and(|m| m.primary != (ip.to_string(), PORT))
        })?;
    Some(Step::Remonitor {
        sentinel: stale.name().to_string(),
        primary: p.name().to_string(),
        ip: ip.to_string(),
    })
}

/// `SENTINEL RESET` on the first wanted sentinel that lists a replica or sentinel no member
/// announces any more (a removed one), or itself, while every other wanted sentinel knows the whole
/// group: one at a time, so the others can still agree on a failover meanwhile.
pub(super) fn reset(group: &Group, members: &Members, ip: &str) -> Option<Step> {
    let wanted = || members.sentinels.iter().filter(|s| group.wants(s.facts.at));
    let stale = wanted().find(|s| {
        s.monitored().is_some_and(|m| {
            // Itself as a peer: a hello of its previous run (another run id, same address),
            // replayed to it from a replica's backlog after it restarted; it ignores only
            // hellos with its own run id, and the ghost answers its pings, so it stays.
            let itself = |peer: &&Peer| s.facts.address.as_deref() == Some(peer.ip.as_str());
            m.primary.0 == ip
                && (m
                    .replicas
                    .iter()
                    .chain(&m.sentinels)
                    .any(|peer| !members.has_address(&peer.ip))
                    || m.sentinels.iter().any(|peer| itself(&peer)))
        })
    })?;
    let incomplete = wanted()
        .filter(|o| o.name() != stale.name())
        .find(|o| !knows_the_group(group, members, o));
    Some(match incomplete {
        Some(o) => Step::wait(
            Waiting::SentinelsCatchingUp,
            format!(
                "{} lists members that are gone (or itself); it is reset once {} knows the whole group",
                stale.name(),
                o.name()
            ),
        ),
        None => Step::Reset {
            sentinel: stale.name().to_string(),
        },
    })
}

/// Whether sentinel `s` answers and lists every wanted data node but the one it names
/// primary, and every other wanted sentinel.
pub(super) fn knows_the_group(
    group: &Group,
    members: &Members,
    s: &crate::replication::model::Sentinel,
) -> bool {
    let Some(m) = s.monitored() else {
        return false;
    };
    let replicas = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at))
        .filter_map(|d| d.address())
        .filter(|ip| *ip != m.primary.0);
    let sentinels = members
        .sentinels
        .iter()
        .filter(|o| group.wants(o.facts.at) && o.name() != s.name())
        .filter_map(|o| o.facts.address.as_deref());
    replicas
        .into_iter()
        .all(|ip| m.replicas.iter().any(|r| r.ip == ip))
        && sentinels
            .into_iter()
            .all(|ip| m.sentinels.iter().any(|o| o.ip == ip))
}

/// The first wanted sentinel that answers, names `p` (at `ip`) and sees a replica it could
/// elect (priority above 0: a restarted replica holds 0 until its first sync, and Sentinel
/// reads it back only every 10 s), to run a hand-over.
pub(super) fn sentinel_for<'a>(group: &Group, members: &'a Members, ip: &str) -> Option<&'a str> {
    members
        .sentinels
        .iter()
        .filter(|s| group.wants(s.facts.at))
        .find(|s| {
            s.monitored().is_some_and(|m| {
                m.primary == (ip.to_string(), PORT)
                    && m.replicas.iter().any(|r| r.priority.is_some_and(|p| p > 0))
            })
        })
        .map(|s| s.name())
}
