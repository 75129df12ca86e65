//! Rules on the data nodes themselves: the `replication` user, replicas following the
//! primary, live directives, and whether the image may run on them.

use crd_types::conditions::reasons::Waiting;

use super::Step;
use crate::replication::PORT;
use crate::replication::model::{DataNode, Group, Members};
use crate::shared::acl;
use crate::shared::{live, target};

/// `Step::CreateReplicationUser` for the data nodes that answered without a usable
/// `replication` user (a replica re-pointed, promoted or rolled logs in to them as it).
/// First: creating a user disturbs no failover Sentinel runs.
pub(super) fn replication_user(group: &Group, members: &Members) -> Option<Step> {
    let password = group.replication_password.as_ref()?;
    let lacking = acl::lacking_replication_user(
        password,
        members.data.iter().map(|d| {
            let read = d.answer.as_ref().and_then(|a| a.replication_user.as_ref());
            // Not a cluster: no atomic slot migration.
            (d.name(), read.map(Option::as_ref), false)
        }),
    );
    (!lacking.is_empty()).then(|| Step::CreateReplicationUser {
        members: lacking,
        password: password.clone(),
    })
}

/// `REPLICAOF` for the first wanted data node that serves as a primary besides `p` or
/// follows another address. A primary that has served (its replication offset moved) is
/// demoted; a new one (offset 0) has nothing and nobody to disconnect. Only new ones while a
/// sentinel whose pod is Ready does not answer: it may be the one failing over, to one of
/// these data nodes or to the primary one follows. (A sentinel whose pod is not Ready runs
/// no failover: its process is gone, frozen or not started.)
pub(super) fn attach(group: &Group, members: &Members, p: &DataNode, ip: &str) -> Option<Step> {
    let mut strays = members
        .data
        .iter()
        .filter(|d| group.wants(d.facts.at) && d.name() != p.name() && d.answer.is_some())
        .filter(|d| d.is_primary() || d.follows() != Some((ip, PORT)));
    let unheard = members
        .sentinels
        .iter()
        .find(|s| s.answer.is_none() && s.facts.ready);
    let d = match unheard {
        None => strays.next()?,
        Some(unheard) => {
            let strays: Vec<&DataNode> = strays.collect();
            let first = strays.first()?;
            match strays.iter().find(|d| d.is_primary() && d.offset() == 0) {
                Some(new) => *new,
                None => {
                    return Some(Step::wait(
                        Waiting::SentinelsCatchingUp,
                        format!(
                            "{} does not follow {}, and {} does not answer although its pod is Ready: it may be failing over",
                            first.name(),
                            p.name(),
                            unheard.name()
                        ),
                    ));
                }
            }
        }
    };
    Some(Step::ReplicaOf {
        member: d.name().to_string(),
        primary: p.name().to_string(),
        ip: ip.to_string(),
        demote: d.is_primary() && d.offset() > 0,
    })
}

/// `Step::SetConfig` for every wanted data node that runs a live directive at another value.
pub(super) fn set_live_config(group: &Group, members: &Members) -> Option<Step> {
    let changes = live::live_changes(
        &group.config,
        members
            .data
            .iter()
            .filter(|d| group.wants(d.facts.at))
            .map(|d| {
                let running = d.answer.as_ref().and_then(|a| a.live_config.as_ref());
                (d.name(), running)
            }),
    );
    (!changes.is_empty()).then_some(Step::SetConfig(changes))
}

/// A wait while the data nodes' image may reach none of them ([`target`]).
pub(super) fn refused_target(group: &Group, members: &Members) -> Option<Step> {
    let running: Vec<(&str, _)> = members
        .data
        .iter()
        .filter_map(|d| Some((d.name(), d.answer.as_ref()?.live_config.as_ref()?.version)))
        .collect();
    let (reason, message) = target::refuse(&group.image, &group.config, &running)?;
    Some(Step::wait(reason, message))
}
