use super::*;

fn fixture<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_json::from_str(text).unwrap()
}

/// 2026-12-05T10:00:00Z.
const NOW: i64 = 1_796_464_800;

fn render_cluster() -> String {
    let topology = Topology::Cluster(fixture(include_str!("../../fixtures/cluster.json")));
    let nodes: Vec<ValkeyNode> = fixture(include_str!("../../fixtures/nodes.json"));
    let events: Vec<Event> = fixture(include_str!("../../fixtures/events.json"));
    View {
        namespace: "prod",
        topology: &topology,
        nodes: &nodes,
        events: &events,
        last_events: 2,
        now: NOW,
    }
    .render()
}

#[test]
fn the_fixture_time_is_now() {
    let t: Time = serde_json::from_value(serde_json::json!("2026-12-05T10:00:00Z")).unwrap();
    assert_eq!(seconds(&t), NOW);
}

#[test]
fn a_cluster_shows_members_with_their_shard_slots_link_and_lag() {
    let out = render_cluster();
    assert!(
        out.starts_with("ValkeyCluster prod/orders\nPhase: Paused   (valkey.rs/paused is set"),
        "{out}"
    );
    assert!(
        out.contains("Shards: 2 ready of 2, 1 replicas each   Slots assigned: 16384/16384"),
        "{out}"
    );
    let members = "Members:\n\
        NAME         ROLE      READY   SHARD   SLOTS        LINK   LAG\n\
        orders-0-0   Primary   true    0       0-8191       -      -\n\
        orders-0-1   Replica   true    0       -            up     10\n\
        orders-1-0   Replica   false   1       -            down   -\n\
        orders-1-1   Primary   true    1       8192-16383   -      -\n";
    assert!(out.contains(members), "{out}");
    assert!(out.contains("Shards:\nSHARD   PRIMARY      SLOTS        READY\n0       orders-0-0   0-8191       2/2\n1       orders-1-1   8192-16383   1/2\n"), "{out}");
    assert!(
        out.contains("Switchover r1: Succeeded (orders-1-1 is the primary of shard 1)"),
        "{out}"
    );
}

#[test]
fn a_cluster_shows_conditions_certificates_volumes_and_the_last_events() {
    let out = render_cluster();
    assert!(
        out.contains("Ready         True     Paused   10m   the last Ready seen"),
        "{out}"
    );
    assert!(out.contains("Progressing   False    Paused   2m "), "{out}");
    assert!(
        out.contains("clients trust ca.crt of Secret orders-ca"),
        "{out}"
    );
    assert!(out.contains("CA replacement: Trusting since 2026-12-05T10:00:00Z, clients re-read orders-ca until 2026-12-06T10:00:00Z, waiting for orders-1-0 to load its certificate"), "{out}");
    assert!(
        out.contains(
            "orders-0-0   orders-0-0-data   1Gi         1Gi        100.0Mi   924.0Mi     Bound"
        ),
        "{out}"
    );
    assert!(
        out.contains("Least headroom: orders-1-0 with 10.0Mi free (84% used)"),
        "{out}"
    );
    // The two latest, oldest first; the third is left out.
    let events = out.split("Events:\n").nth(1).unwrap();
    assert_eq!(
        events,
        "LAST SEEN   TYPE     REASON              OBJECT                 MESSAGE\n\
         60s         Normal   SwitchedOver        valkeycluster/orders   orders-1-1 took over shard 1\n\
         0s          Normal   CertificateIssued   valkeycluster/orders   replacing the CA: trusting both\n"
    );
}

#[test]
fn a_replication_shows_offsets_and_lag_behind_the_primary() {
    let topology = Topology::Replication(fixture(include_str!("../../fixtures/replication.json")));
    let out = View {
        namespace: "prod",
        topology: &topology,
        nodes: &[],
        events: &[],
        last_events: 10,
        now: NOW,
    }
    .render();
    assert!(
        out.contains("Primary: sessions-1   Data nodes: 2 ready of 2   Sentinels: 1 ready of 1"),
        "{out}"
    );
    let members = "NAME                  ROLE       READY   OFFSET   LINK         LAG\n\
        sessions-0            Replica    true    900      up           100\n\
        sessions-1            Primary    true    1000     -            -\n\
        sessions-sentinel-0   Sentinel   true    -        monitoring   -\n";
    assert!(out.contains(members), "{out}");
    assert!(!out.contains("Shards:"), "{out}");
    assert!(out.contains("Password rotation (default): 1 of 2 members have the new one, previous until 2026-12-05T10:05:00Z, held back by sessions-0"), "{out}");
    assert!(out.contains("Certificates: no TLS"), "{out}");
    assert!(out.contains("Volumes: none reported"), "{out}");
    assert!(out.contains("Events: none"), "{out}");
}
