//! `kubectl valkey status <name>`.

use anyhow::Result;

use crate::kube_api::Session;
use crate::status_view::View;

pub async fn run(session: &Session, name: &str, last_events: usize) -> Result<()> {
    let topology = session.topology(name).await?;
    let nodes = session.members(&topology).await?;
    let events = session.events(&topology, &nodes).await?;
    let view = View {
        namespace: &session.namespace,
        topology: &topology,
        nodes: &nodes,
        events: &events,
        last_events,
        now: super::now(),
    };
    print!("{}", view.render());
    Ok(())
}
