//! `kubectl valkey pause|resume <name>`: the valkey.rs/paused annotation.

use anyhow::Result;

use crate::kube_api::Session;
use crate::patches;

pub async fn run(session: &Session, name: &str, pause: bool) -> Result<()> {
    let topology = session.topology(name).await?;
    let was = patches::is_paused(&topology.annotations());
    let patch = if pause {
        patches::pause()
    } else {
        patches::resume()
    };
    session.patch_topology(&topology, &patch).await?;
    let object = super::object(&topology);
    match (pause, was) {
        (true, true) => println!("{object} was already paused"),
        (true, false) => println!(
            "{object} paused: the operator takes no step on it (no roll, scaling, failover following or rotation) until it is resumed; Valkey keeps serving"
        ),
        (false, true) => println!(
            "{object} resumed: the operator goes on from whatever the topology looks like now"
        ),
        (false, false) => println!("{object} was not paused"),
    }
    Ok(())
}
