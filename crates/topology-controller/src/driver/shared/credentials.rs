//! The passes over a topology's credentials, written once for every kind: `spec.users` on
//! the data nodes, the default password on the data nodes and the operator password on every
//! member, and with TLS the certificates. A kind lists its members as [`Members`]; what only
//! one kind has (a ValkeyReplication's sentinels' own password) joins as `also`.

use std::future::Future;

use crd_types::ValkeyNode;
use crd_types::rotation::PasswordRotation;
use topology_controller::shared::connections::Connections;
use topology_controller::shared::{default_password, operator_password, users};

use crate::driver::shared::member_tls;
use crate::driver::shared::secrets::Passwords;
use crate::driver::shared::stages::{self, Apis, Credentials, Prepared};
use crate::driver::shared::topology::Topology;
use crate::driver::shared::valkey::{Conn, DataLoginOf, OperatorConn, SentinelLoginOf};

impl AsRef<Passwords> for Passwords {
    fn as_ref(&self) -> &Passwords {
        self
    }
}

/// A member where the passes dial it, once its address is known.
pub struct Reached<'a> {
    pub name: &'a str,
    pub ip: Option<&'a str>,
    pub port: u16,
}

/// A data node: where it is, the version it answered with, its ValkeyNode.
pub struct DataNode<'a> {
    pub at: Reached<'a>,
    pub version: Option<&'a str>,
    pub node: Option<&'a ValkeyNode>,
}

/// A topology's members as the passes see them, and the connections to them.
pub struct Members<'a> {
    pub data: Vec<DataNode<'a>>,
    pub sentinels: Vec<Reached<'a>>,
    pub nodes: &'a [ValkeyNode],
    pub connections: &'a Connections<Conn>,
}

/// The passes, in order: users, then the password passes (with `also`, at once: each is
/// bounded and all run before the step), then the certificates.
pub async fn passes<T, P>(
    ctx: &operator_runtime::Context,
    apis: &Apis<T>,
    checks: &users::Checks,
    prepared: &Prepared<T, P>,
    members: &Members<'_>,
    also: impl Future<Output = Vec<PasswordRotation>> + Send,
) -> Credentials
where
    T: Topology,
    P: AsRef<Passwords>,
{
    let topology = &prepared.live.topology;
    let connections = members.connections;
    let builds: Vec<Option<String>> = members
        .data
        .iter()
        .map(|d| Some(users::build(d.version?, d.node?)))
        .collect();
    let user_members: Vec<users::Member<'_, Conn>> = members
        .data
        .iter()
        .zip(&builds)
        .map(|(d, build)| users::Member {
            name: d.at.name,
            version: build.as_deref(),
            conn: connections.find(d.at.name),
        })
        .collect();
    let users = stages::users_pass(ctx, apis, checks, topology, &user_members).await;
    let ((mut rotations, on_operator), more) = futures::join!(
        password_passes(ctx, apis, topology, prepared.passwords.as_ref(), members),
        also
    );
    // Recorded as before: the data nodes' default password, the kind's own, the operator's.
    rotations.extend(more);
    rotations.extend(on_operator);
    let ca = match &prepared.login {
        Some(login) => {
            let data = members
                .data
                .iter()
                .filter_map(|d| tls_member(&d.at))
                .collect();
            let sentinels = members.sentinels.iter().filter_map(tls_member).collect();
            let live = &prepared.live;
            stages::certificates_pass(ctx, apis, live, login, connections, data, sentinels).await
        }
        None => None,
    };
    Credentials {
        users,
        rotations,
        ca,
    }
}

/// A member the certificate pass dials, once its address is known.
fn tls_member<'a>(m: &Reached<'a>) -> Option<member_tls::Member<'a>> {
    Some(member_tls::Member {
        name: m.name,
        ip: m.ip?,
        port: m.port,
    })
}

/// The default password on the data nodes and the operator password on every member; what
/// each records.
async fn password_passes<T: Topology>(
    ctx: &operator_runtime::Context,
    apis: &Apis<T>,
    topology: &T,
    passwords: &Passwords,
    members: &Members<'_>,
) -> (Vec<PasswordRotation>, Vec<PasswordRotation>) {
    let connections = members.connections;
    let data: Vec<default_password::Member<'_, Conn>> = members
        .data
        .iter()
        .map(|d| default_password::Member {
            name: d.at.name,
            conn: connections.find(d.at.name),
        })
        .collect();
    let name = topology.meta().name.clone().unwrap_or_default();
    let operator_conns: Vec<(&str, operator_password::Kind, Option<OperatorConn<'_>>)> = members
        .data
        .iter()
        .map(|d| {
            let conn = connections
                .find(d.at.name)
                .map(|c| OperatorConn::Data(DataLoginOf(c)));
            (d.at.name, operator_password::Kind::DataNode, conn)
        })
        .chain(members.sentinels.iter().map(|s| {
            let conn = connections
                .find(s.name)
                .map(|conn| OperatorConn::Sentinel(SentinelLoginOf { conn, group: &name }));
            (s.name, operator_password::Kind::Sentinel, conn)
        }))
        .collect();
    let operator: Vec<operator_password::Member<'_, OperatorConn<'_>>> = operator_conns
        .iter()
        .map(|(name, kind, conn)| operator_password::Member {
            name,
            kind: *kind,
            conn: conn.as_ref(),
        })
        .collect();
    stages::password_passes(
        ctx,
        apis,
        topology,
        passwords,
        &data,
        &operator,
        members.nodes,
    )
    .await
}
