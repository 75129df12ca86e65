//! Observe: connect to every member's Valkey (fred, logged in as `operator`) and ask it
//! what it sees, all members at once, each within
//! [`LOOK_BOUND`](crate::driver::shared::valkey::LOOK_BOUND). The connections are kept for
//! the step and closed by the caller in one place.

use crd_types::ValkeyNode;
use futures::future::join_all;
use topology_controller::cluster::members;
use topology_controller::cluster::model::Member;
use topology_controller::cluster::observe::ask;
use topology_controller::shared::commands::ErrorKind;
use topology_controller::shared::connections::Connections;

use crate::driver::shared::valkey::{Conn, Login};

/// The members with what their Valkey answered, in position order.
pub struct Observed {
    pub nodes: Vec<ValkeyNode>,
    pub members: Vec<Member>,
    /// Each member's version (INFO server), where it answered.
    pub versions: Vec<Option<String>>,
    /// Members that answered but refused the operator's login.
    pub login_refused: Vec<String>,
}

/// One member, asked.
struct Asked {
    node: ValkeyNode,
    member: Member,
    version: Option<String>,
    login_refused: bool,
    conn: Option<Conn>,
}

/// Asks every member of `nodes` (ValkeyNodes that are no member are skipped). Without a
/// login nothing is asked: members are then only what Kubernetes says of them.
pub async fn observe(
    nodes: Vec<ValkeyNode>,
    login: Option<&Login>,
) -> (Observed, Connections<Conn>) {
    let mut asked: Vec<Asked> = join_all(nodes.into_iter().filter_map(|node| {
        let member = members::observed(&node)?;
        Some(ask_member(node, member, login))
    }))
    .await;
    asked.sort_by_key(|a| a.member.at);
    let mut connections = Connections::default();
    let mut observed = Observed {
        nodes: Vec::new(),
        members: Vec::new(),
        versions: Vec::new(),
        login_refused: Vec::new(),
    };
    for a in asked {
        if a.login_refused {
            observed.login_refused.push(a.member.name.clone());
        }
        if let Some(conn) = a.conn {
            connections.insert(a.member.name.clone(), conn);
        }
        observed.nodes.push(a.node);
        observed.members.push(a.member);
        observed.versions.push(a.version);
    }
    (observed, connections)
}

async fn ask_member(node: ValkeyNode, mut member: Member, login: Option<&Login>) -> Asked {
    let mut asked = Asked {
        node,
        member: member.clone(),
        version: None,
        login_refused: false,
        conn: None,
    };
    let (Some(address), Some(login)) = (&member.address, login) else {
        return asked;
    };
    match Conn::look(&address.ip, address.port, login, async |c| ask(c).await).await {
        Ok((conn, answer)) => {
            member.reply = Some(answer.reply);
            asked.member = member;
            asked.version = answer.version;
            asked.conn = Some(conn);
        }
        Err(e) if e.kind == ErrorKind::Login => {
            tracing::warn!(member = %member.name, error = %e, "member refuses the operator's login");
            asked.login_refused = true;
        }
        Err(e) => tracing::debug!(member = %member.name, error = %e, "member does not answer"),
    }
    asked
}
