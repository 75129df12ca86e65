//! Observe a ValkeyReplication's members: connect to every data node (port 6379) and every
//! sentinel (port 26379) at its announce address, logged in as `operator`, and ask each
//! what it knows, all at once. The connections are kept for the step and closed by the
//! caller in one place.

use crd_types::ValkeyNode;
use futures::future::join_all;
use topology_controller::replication::members;
use topology_controller::replication::model::{
    At, DataAnswer, DataNode, Facts, Members, Sentinel, SentinelAnswer,
};
use topology_controller::replication::observe::{ask_data, ask_sentinel};
use topology_controller::replication::{PORT, SENTINEL_PORT};
use topology_controller::shared::commands::{ErrorKind, ValkeyError};
use topology_controller::shared::connections::Connections;

use crate::driver::shared::valkey::{Conn, Login};

/// The members with what they answered, in position order.
pub struct Observed {
    /// The ValkeyNodes, as fetched.
    pub nodes: Vec<ValkeyNode>,
    pub members: Members,
    /// Members that answered but refused the operator's login.
    pub login_refused: Vec<String>,
}

/// What one member answered.
enum Answer {
    Data(Option<DataAnswer>),
    Sentinel(Option<SentinelAnswer>),
}

struct Asked {
    facts: Facts,
    answer: Answer,
    login_refused: bool,
    conn: Option<Conn>,
}

/// Asks every member among `nodes` (ValkeyNodes that are no member are skipped). Without a
/// login nothing is asked: members are then only what Kubernetes says of them.
pub async fn observe(
    name: &str,
    nodes: Vec<ValkeyNode>,
    login: Option<&Login>,
) -> (Observed, Connections<Conn>) {
    let mut asked: Vec<Asked> = join_all(
        nodes
            .iter()
            .filter_map(members::observed)
            .map(|facts| ask(name, facts, login)),
    )
    .await;
    asked.sort_by_key(|a| a.facts.at);
    let mut connections = Connections::default();
    let mut observed = Observed {
        nodes,
        members: Members::default(),
        login_refused: Vec::new(),
    };
    for a in asked {
        if a.login_refused {
            observed.login_refused.push(a.facts.name.clone());
        }
        if let Some(conn) = a.conn {
            connections.insert(a.facts.name.clone(), conn);
        }
        match a.answer {
            Answer::Data(answer) => observed.members.data.push(DataNode {
                facts: a.facts,
                answer,
            }),
            Answer::Sentinel(answer) => observed.members.sentinels.push(Sentinel {
                facts: a.facts,
                answer,
            }),
        }
    }
    (observed, connections)
}

async fn ask(name: &str, facts: Facts, login: Option<&Login>) -> Asked {
    let sentinel = matches!(facts.at, At::Sentinel(_));
    let mut asked = Asked {
        answer: if sentinel {
            Answer::Sentinel(None)
        } else {
            Answer::Data(None)
        },
        facts,
        login_refused: false,
        conn: None,
    };
    let (Some(ip), Some(login)) = (asked.facts.address.clone(), login) else {
        return asked;
    };
    let port = if sentinel { SENTINEL_PORT } else { PORT };
    let answered = Conn::look(&ip, port, login, async |conn| {
        if sentinel {
            ask_sentinel(conn, name)
                .await
                .map(|a| Answer::Sentinel(Some(a)))
        } else {
            ask_data(conn).await.map(|a| Answer::Data(Some(a)))
        }
    })
    .await;
    match answered {
        Ok((conn, answer)) => {
            asked.answer = answer;
            asked.conn = Some(conn);
        }
        Err(e) => note_unanswered(&mut asked, &e),
    }
    asked
}

fn note_unanswered(asked: &mut Asked, e: &ValkeyError) {
    if e.kind == ErrorKind::Login {
        tracing::warn!(member = %asked.facts.name, error = %e, "member refuses the operator's login");
        asked.login_refused = true;
    } else {
        tracing::debug!(member = %asked.facts.name, error = %e, "member does not answer");
    }
}
