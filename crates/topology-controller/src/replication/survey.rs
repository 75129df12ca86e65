//! The group read as one: who is primary ([`primary`]), and what keeps it from being healthy
//! ([`Health`]). The planner and status both read it.

use std::collections::{BTreeMap, BTreeSet};

use crate::replication::PORT;
use crate::replication::model::{DataNode, Group, Members, Sentinel};

/// The primary: the data node a majority of the sentinels that monitor the group name.
/// Before any sentinel monitors it (a new group, or sentinels that all lost their state),
/// the one data node serving as primary with replicas; failing that the primary status
/// last `recorded`, else data node 0 (the first primary of a new group). `Err` says why none
/// can be named.
pub fn primary<'a>(
    group: &Group,
    members: &'a Members,
    recorded: Option<&str>,
) -> Result<&'a DataNode, NoPrimary> {
    let mut votes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in &members.sentinels {
        if let Some(m) = s.monitored() {
            votes
                .entry(m.primary.0.as_str())
                .or_default()
                .push(s.name());
        }
    }
    let voters: usize = votes.values().map(Vec::len).sum();
    if voters > 0 {
        let (ip, by) = votes
            .iter()
            .max_by_key(|(_, by)| by.len())
            .expect("some sentinel voted");
        if by.len() * 2 <= voters {
            let votes = votes
                .iter()
                .map(|(ip, by)| (ip.to_string(), by.iter().map(|s| s.to_string()).collect()))
                .collect();
            return Err(NoPrimary::SentinelsDisagree { votes });
        }
        return members.data_at(ip).ok_or_else(|| NoPrimary::NotADataNode {
            ip: ip.to_string(),
            group: group.name.clone(),
        });
    }
    let serving: Vec<&DataNode> = members
        .data
        .iter()
        .filter(|d| {
            d.is_primary()
                && d.answer
                    .as_ref()
                    .is_some_and(|a| a.replication.connected_replicas > 0)
        })
        .collect();
    match serving.as_slice() {
        [one] => Ok(one),
        [] => recorded
            .and_then(|name| members.data_node(name))
            .or_else(|| {
                members.data_node(&group.member_name(crate::replication::model::At::Data(0)))
            })
            .ok_or(NoPrimary::NoDataNodeYet),
        many => Err(NoPrimary::ManyServing {
            group: group.name.clone(),
            serving: many.iter().map(|d| d.name().to_string()).collect(),
        }),
    }
}

/// Why no data node can be named the group's primary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoPrimary {
    /// No data node has a majority of the monitoring sentinels: each IP they name, with
    /// the sentinels naming it.
    #[error("the sentinels disagree: {}", said(votes))]
    SentinelsDisagree { votes: Vec<(String, Vec<String>)> },
    #[error("the sentinels name {ip}, which is no data node of {group}")]
    NotADataNode { ip: String, group: String },
    #[error("data node 0 does not exist yet")]
    NoDataNodeYet,
    #[error(
        "no sentinel monitors {group} and {} all serve as primary with replicas; resolve by hand",
        serving.join(", ")
    )]
    ManyServing { group: String, serving: Vec<String> },
}

/// The sentinels' votes in words: who names which IP.
fn said(votes: &[(String, Vec<String>)]) -> String {
    let said: Vec<String> = votes
        .iter()
        .map(|(ip, by)| format!("{} name {ip}", by.join(", ")))
        .collect();
    said.join("; ")
}

/// Whether the group is new: no sentinel monitors it and no data node has replicas.
pub fn forming(members: &Members) -> bool {
    members.sentinels.iter().all(|s| s.monitored().is_none())
        && members.data.iter().all(|d| {
            d.answer
                .as_ref()
                .is_none_or(|a| a.replication.connected_replicas == 0 && d.is_primary())
        })
}

/// What keeps the group from being healthy, read once for status.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// The primary's member name, or why there is none.
    pub primary: Result<String, NoPrimary>,
    /// Wanted data nodes ready and playing their part: the primary serving, a replica in
    /// sync with it.
    pub ready_data: usize,
    /// Wanted sentinels ready and monitoring the primary.
    pub ready_sentinels: usize,
    /// Wanted members whose pod is not ready or whose Valkey does not answer.
    pub unwell: Vec<String>,
    /// The first replica not linked to the primary or resyncing.
    pub unlinked: Option<String>,
    /// The first sentinel whose view is not exactly the group (monitoring the primary,
    /// knowing every wanted replica and sentinel and nothing else), in words.
    pub sentinel_view: Option<String>,
    /// Members the spec no longer wants.
    pub leaving: Vec<String>,
    /// Some wanted member runs another revision than its spec renders to.
    pub rolling: bool,
    /// Wanted members whose spec does not yet say that sentinels monitor the group.
    pub untold: Vec<String>,
}

impl Health {
    pub fn of(group: &Group, members: &Members, recorded: Option<&str>) -> Health {
        let primary = primary(group, members, recorded);
        let wanted_data = || members.data.iter().filter(|d| group.wants(d.facts.at));
        let wanted_sentinels = || members.sentinels.iter().filter(|s| group.wants(s.facts.at));
        let serving = |d: &DataNode| match &primary {
            Ok(p) => {
                d.facts.ready
                    && if d.name() == p.name() {
                        d.is_primary()
                    } else {
                        d.in_sync_with(p)
                    }
            }
            Err(_) => false,
        };
        let unlinked = primary.as_ref().ok().and_then(|p| {
            wanted_data()
                .filter(|d| d.name() != p.name() && d.answer.is_some())
                .find(|d| !d.in_sync_with(p))
                .map(|d| d.name().to_string())
        });
        let sentinel_view = match &primary {
            Ok(p) => wanted_sentinels().find_map(|s| view_problem(group, members, p, s)),
            Err(_) => None,
        };
        let unwell = wanted_data()
            .map(|d| (&d.facts, d.answer.is_some()))
            .chain(wanted_sentinels().map(|s| (&s.facts, s.answer.is_some())))
            .filter(|(f, answers)| !f.ready || !answers)
            .map(|(f, _)| f.name.clone())
            .collect();
        let leaving = members
            .data
            .iter()
            .map(|d| &d.facts)
            .chain(members.sentinels.iter().map(|s| &s.facts))
            .filter(|f| !group.wants(f.at))
            .map(|f| f.name.clone())
            .collect();
        let rolling = wanted_data()
            .map(|d| &d.facts)
            .chain(wanted_sentinels().map(|s| &s.facts))
            .any(|f| f.revisions.desired != f.revisions.running);
        let untold = wanted_data()
            .map(|d| &d.facts)
            .chain(wanted_sentinels().map(|s| &s.facts))
            .filter(|f| !f.told_monitored)
            .map(|f| f.name.clone())
            .collect();
        Health {
            ready_data: wanted_data().filter(|d| serving(d)).count(),
            ready_sentinels: match &primary {
                Ok(p) => wanted_sentinels()
                    .filter(|s| {
                        s.facts.ready
                            && s.monitored()
                                .is_some_and(|m| Some(m.primary.0.as_str()) == p.address())
                    })
                    .count(),
                Err(_) => 0,
            },
            primary: primary.map(|p| p.name().to_string()),
            unwell,
            unlinked,
            sentinel_view,
            leaving,
            rolling,
            untold,
        }
    }
}

/// What is wrong with sentinel `s`'s view of the group whose primary is `p`, if anything:
/// it must monitor `p` and know exactly the wanted replicas (none counted down) and the
/// other wanted sentinels.
pub fn view_problem(
    group: &Group,
    members: &Members,
    p: &DataNode,
    s: &Sentinel,
) -> Option<String> {
    let name = s.name();
    let Some(m) = s.monitored() else {
        return s
            .answer
            .is_some()
            .then(|| format!("{name} does not monitor {}", group.name));
    };
    let p_ip = p.address()?;
    if m.primary != (p_ip.to_string(), PORT) {
        return Some(format!(
            "{name} names {}:{} as primary, not {} ({p_ip})",
            m.primary.0,
            m.primary.1,
            p.name()
        ));
    }
    let want_replicas: BTreeSet<&str> = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at) && d.name() != p.name())
        .filter_map(|d| d.address())
        .collect();
    let have_replicas: BTreeSet<&str> = m.replicas.iter().map(|r| r.ip.as_str()).collect();
    if have_replicas.len() != m.replicas.len() {
        return Some(format!("{name} lists a replica twice"));
    }
    if have_replicas != want_replicas {
        return Some(format!(
            "{name} knows the replicas {have_replicas:?}, not {want_replicas:?}"
        ));
    }
    if let Some(down) = m.replicas.iter().find(|r| r.is_down()) {
        return Some(format!("{name} counts replica {} down", down.ip));
    }
    // SENTINEL FAILOVER (a hand-over, a primary's preStop hook) answers NOGOODSLAVE while
    // the sentinel's copy of every replica's priority is 0: a replica starts at 0 until its
    // first sync, and Sentinel reads the restored one only at its next INFO, 10 s later.
    let electable = m.replicas.iter().any(|r| r.priority.is_some_and(|p| p > 0));
    if group.replica_priority > 0 && !m.replicas.is_empty() && !electable {
        return Some(format!(
            "{name} would elect no replica yet: it last read every replica-priority as 0 \
             (a replica's is 0 until its first sync; Sentinel reads it every 10 s)"
        ));
    }
    let want_sentinels: BTreeSet<&str> = members
        .sentinels
        .iter()
        .filter(|o| group.wants(o.facts.at) && o.name() != name)
        .filter_map(|o| o.facts.address.as_deref())
        .collect();
    let have_sentinels: BTreeSet<&str> = m.sentinels.iter().map(|o| o.ip.as_str()).collect();
    if have_sentinels.len() != m.sentinels.len() {
        return Some(format!("{name} lists a sentinel twice"));
    }
    (have_sentinels != want_sentinels)
        .then(|| format!("{name} knows the sentinels {have_sentinels:?}, not {want_sentinels:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn why_no_primary_is_told_in_the_same_words() {
        let votes = vec![
            ("10.96.0.1".into(), vec!["g-s-0".into()]),
            ("10.96.0.2".into(), vec!["g-s-1".into(), "g-s-2".into()]),
        ];
        assert_eq!(
            NoPrimary::SentinelsDisagree { votes }.to_string(),
            "the sentinels disagree: g-s-0 name 10.96.0.1; g-s-1, g-s-2 name 10.96.0.2"
        );
        let many = NoPrimary::ManyServing {
            group: "g".into(),
            serving: vec!["g-0".into(), "g-1".into()],
        };
        assert_eq!(
            many.to_string(),
            "no sentinel monitors g and g-0, g-1 all serve as primary with replicas; resolve by hand"
        );
    }
}
