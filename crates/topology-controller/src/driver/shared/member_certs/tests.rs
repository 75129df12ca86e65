//! The CA, the public CA Secret, the members' certificates and the CA replacement's steps,
//! against [`FakeSecrets`].

use std::time::Duration;

use crd_types::node::{EndpointStatus, ValkeyNodeSpec, ValkeyNodeStatus};
use crd_types::template::Tls;
use crd_types::{ValkeyCluster, ValkeyClusterSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use topology_controller::shared::issuer::{LEAF_LIFETIME, RENEW_BEFORE};

use super::*;
use crate::driver::shared::secret_store::fake::{FakeSecrets, Verb};

const FIELD_MANAGER: &str = "valkey-operator/topology";
const CA_KEY: &str = "cache-ca-key";
const PUBLIC_CA: &str = "cache-ca";
const MEMBER: &str = "cache-0-0";
const MEMBER_TLS: &str = "cache-0-0-tls";

fn topology() -> ValkeyCluster {
    let mut cluster = ValkeyCluster::new("cache", ValkeyClusterSpec::default());
    cluster.metadata.namespace = Some("prod".into());
    cluster.metadata.uid = Some("cluster-uid".into());
    cluster
}

/// The topology, asking for its CA to be replaced.
fn asking() -> ValkeyCluster {
    let mut asking = topology();
    asking.metadata.annotations = Some([(annotations::REPLACE_CA.into(), "1".into())].into());
    asking
}

/// Member `cache-0-0`, its Service at `cluster_ip` (`None`: none yet).
fn node(cluster_ip: Option<&str>) -> ValkeyNode {
    let spec = ValkeyNodeSpec {
        tls: Some(Tls {
            secret_name: MEMBER_TLS.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut node = ValkeyNode::new(MEMBER, spec);
    node.metadata.namespace = Some("prod".into());
    node.metadata.uid = Some("node-uid".into());
    node.status = Some(ValkeyNodeStatus {
        endpoint: Some(EndpointStatus {
            service_name: Some(MEMBER.into()),
            cluster_ip: cluster_ip.map(str::to_string),
            ..Default::default()
        }),
        ..Default::default()
    });
    node
}

fn days(n: u64) -> Duration {
    Duration::from_secs(n * 24 * 3600)
}

/// A controller owner reference to another object (`uid`).
fn foreign_owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "valkey.rs/v1alpha1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        ..Default::default()
    }
}

/// The CA the topology's Secret would hold if made at `now`.
fn ca_secret_made(now: SystemTime) -> Secret {
    new_ca_secret(&topology(), labels::CLUSTER, CA_KEY, now).expect("a CA")
}

async fn prepare_with(fake: &FakeSecrets, members: &[ValkeyNode]) -> Prepared {
    let overlap = ca_replacement::DEFAULT_OVERLAP;
    prepare(
        fake,
        &topology(),
        labels::CLUSTER,
        members,
        true,
        overlap,
        FIELD_MANAGER,
    )
    .await
    .expect("no API error")
}

async fn authority_at(fake: &FakeSecrets, members_exist: bool, now: SystemTime) -> Ca {
    let topology = topology();
    let ca = authority(
        fake,
        &topology,
        labels::CLUSTER,
        members_exist,
        FIELD_MANAGER,
        now,
    );
    ca.await.expect("no API error").expect("a usable CA")
}

/// The CAs the fake's `<topology>-ca-key` holds.
fn cas_of(fake: &FakeSecrets) -> Cas {
    let secret = fake.secret(CA_KEY).expect("the CA Secret");
    Cas {
        current: current_ca(&secret).expect("a CA"),
        next: next_ca(&secret).map(|n| n.expect("a usable next CA")),
    }
}

fn text(fake: &FakeSecrets, name: &str, key: &str) -> Option<String> {
    value(&fake.secret(name)?, key)
}

fn writes_since(fake: &FakeSecrets, before: usize) -> Vec<(Verb, String)> {
    fake.writes().split_off(before)
}

#[tokio::test]
async fn a_new_topology_gets_its_own_ca_and_a_public_copy_of_it() {
    let fake = FakeSecrets::default();
    let prepared = prepare_with(&fake, &[]).await;
    assert!(prepared.client.is_ok(), "{:?}", prepared.client.err());
    assert_eq!(prepared.refused, Vec::<String>::new());
    assert_eq!(
        fake.writes(),
        [
            (Verb::Create, CA_KEY.to_string()),
            (Verb::Create, PUBLIC_CA.to_string())
        ]
    );
    let ca = fake.secret(CA_KEY).expect("created");
    assert_eq!(ca.owner_references()[0].uid, "cluster-uid");
    for key in [TLS_CA_KEY, CA_KEY_KEY, TLS_CERT_KEY, TLS_KEY_KEY] {
        assert!(value(&ca, key).is_some(), "{key}");
    }
    // The public copy holds the certificate alone, never the key.
    let public = fake.secret(PUBLIC_CA).expect("created");
    assert_eq!(public.data.as_ref().map(BTreeMap::len), Some(1));
    assert_eq!(value(&public, TLS_CA_KEY), value(&ca, TLS_CA_KEY));
}

#[tokio::test]
async fn a_valid_ca_is_kept_and_nothing_is_written_again() {
    let fake = FakeSecrets::default();
    prepare_with(&fake, &[]).await;
    let before = fake.writes().len();
    let prepared = prepare_with(&fake, &[]).await;
    assert!(prepared.client.is_ok());
    assert_eq!(prepared.issued, Vec::<String>::new());
    assert_eq!(writes_since(&fake, before), []);
}

#[tokio::test]
async fn a_missing_ca_is_reported_never_made_once_members_exist() {
    let fake = FakeSecrets::default();
    let prepared = prepare_with(&fake, &[node(Some("10.0.0.1"))]).await;
    let why = prepared.client.expect_err("no CA");
    assert!(
        matches!(&why, CaUnusable::GoneWhileMembersRun { secret } if secret == CA_KEY),
        "{why}"
    );
    assert!(
        why.to_string()
            .contains("does not exist but the members already run"),
        "{why}"
    );
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn a_ca_create_meeting_409_uses_the_ca_that_won_the_race() {
    let fake = FakeSecrets::default();
    let theirs = ca_secret_made(SystemTime::now());
    fake.rival_writes_first(theirs.clone());
    let prepared = prepare_with(&fake, &[]).await;
    assert!(prepared.client.is_ok(), "{:?}", prepared.client.err());
    // Theirs is the CA: kept as it is, and the one published.
    assert_eq!(fake.secret(CA_KEY).map(|s| s.data), Some(theirs.data));
    assert_eq!(
        text(&fake, PUBLIC_CA, TLS_CA_KEY),
        text(&fake, CA_KEY, TLS_CA_KEY)
    );
    assert_eq!(fake.writes()[0], (Verb::Create, CA_KEY.to_string()));
    assert!(!fake.writes().contains(&(Verb::Patch, CA_KEY.to_string())));
}

#[tokio::test]
async fn a_ca_secret_not_the_topologys_is_refused_and_left_alone() {
    let controlled = {
        let mut secret = ca_secret_made(SystemTime::now());
        secret.metadata.owner_references = Some(vec![foreign_owner("ValkeyCluster", "x", "x")]);
        secret
    };
    let unowned = {
        let mut secret = ca_secret_made(SystemTime::now());
        secret.metadata.owner_references = None;
        secret
    };
    let cases = [
        (controlled, "belongs to ValkeyCluster x (x)"),
        (unowned, "exists and is not this topology's"),
    ];
    for (secret, expected) in cases {
        let fake = FakeSecrets::with([secret.clone()]);
        let why = prepare_with(&fake, &[]).await.client.expect_err("refused");
        assert!(matches!(why, CaUnusable::NotOwned(_)), "{why}");
        assert!(why.to_string().contains(expected), "{why}");
        assert_eq!(fake.writes(), []);
        assert_eq!(fake.secret(CA_KEY).map(|s| s.data), Some(secret.data));
    }
}

#[tokio::test]
async fn a_ca_secret_without_its_key_is_reported() {
    let mut secret = ca_secret_made(SystemTime::now());
    secret.data.as_mut().unwrap().remove(CA_KEY_KEY);
    let fake = FakeSecrets::with([secret]);
    let why = prepare_with(&fake, &[]).await.client.expect_err("refused");
    assert!(
        matches!(
            why,
            CaUnusable::Content {
                problem: CaSecretProblem::Incomplete,
                ..
            }
        ),
        "{why}"
    );
    assert_eq!(
        why.to_string(),
        "CA Secret cache-ca-key: it needs ca.crt and ca.key"
    );
    assert_eq!(fake.writes(), []);
}

#[tokio::test]
async fn the_operators_certificate_is_renewed_only_once_near_its_end() {
    let now = SystemTime::now();
    let fake = FakeSecrets::with([ca_secret_made(now)]);
    let before = text(&fake, CA_KEY, TLS_CERT_KEY);
    let renew_at = now + LEAF_LIFETIME - RENEW_BEFORE;
    let (_, _, done) = authority_at(&fake, true, renew_at - days(1)).await;
    assert_eq!(done, None);
    assert_eq!(fake.writes(), []);
    let (_, leaf, done) = authority_at(&fake, true, renew_at + days(1)).await;
    let done = done.expect("renewed");
    assert!(done.starts_with("the operator's own certificate: its certificate expires in"));
    assert_eq!(fake.writes(), [(Verb::Patch, CA_KEY.to_string())]);
    let after = text(&fake, CA_KEY, TLS_CERT_KEY);
    assert_ne!(after, before);
    assert_eq!(after, Some(leaf.cert_pem));
}

#[tokio::test]
async fn a_replacement_asked_for_keeps_a_next_ca_and_publishes_both() {
    let fake = FakeSecrets::default();
    prepare_with(&fake, &[]).await;
    let asking = asking();
    let overlap = ca_replacement::DEFAULT_OVERLAP;
    let prepared = prepare(
        &fake,
        &asking,
        labels::CLUSTER,
        &[],
        true,
        overlap,
        FIELD_MANAGER,
    );
    let prepared = prepared.await.expect("no API error");
    let issued = prepared.issued.join("; ");
    assert!(
        issued.contains("replacing the CA (the topology asks for it"),
        "{issued}"
    );
    let ca = fake.secret(CA_KEY).expect("kept");
    assert_eq!(ca.annotations()[annotations::REPLACE_CA], "1");
    let cas = cas_of(&fake);
    assert!(matches!(&cas.next, Some(n) if n.phase == Phase::Trusting));
    assert_eq!(text(&fake, PUBLIC_CA, TLS_CA_KEY), Some(cas.trusted()));
    let client = prepared.client.expect("a client");
    assert!(client.replacement.is_some());
    // Answered: asked again with the same value, nothing more is started.
    let before = fake.writes().len();
    let again = prepare(
        &fake,
        &asking,
        labels::CLUSTER,
        &[],
        true,
        overlap,
        FIELD_MANAGER,
    );
    assert_eq!(
        again.await.expect("no API error").issued,
        Vec::<String>::new()
    );
    assert_eq!(writes_since(&fake, before), []);
}

#[tokio::test]
async fn a_replacement_is_not_started_on_a_ca_secret_changed_meanwhile() {
    let fake = FakeSecrets::default();
    prepare_with(&fake, &[]).await;
    let asking = asking();
    // Another leader wrote the Secret between this one's read and its write.
    fake.rival_writes_first(fake.secret(CA_KEY).expect("the CA"));
    let now = SystemTime::now();
    let ca = authority(&fake, &asking, labels::CLUSTER, true, FIELD_MANAGER, now).await;
    let Err(Error::Api(e)) = ca else {
        panic!("a conflict");
    };
    assert_eq!((e.op, e.status_code()), (Op::Apply, Some(409)));
    assert_eq!(text(&fake, CA_KEY, NEXT_CA_CERT_KEY), None);
}

#[tokio::test]
async fn the_public_ca_secret_is_brought_back_to_the_ca_alone() {
    let now = SystemTime::now();
    let mut public = auth::owned_secret(&topology(), labels::CLUSTER, PUBLIC_CA, TLS_CA_KEY, "x");
    let data = public.data.as_mut().unwrap();
    data.insert(CA_KEY_KEY.into(), bytes("leaked"));
    let fake = FakeSecrets::with([ca_secret_made(now), public]);
    let prepared = prepare_with(&fake, &[]).await;
    assert_eq!(prepared.refused, Vec::<String>::new());
    let public = fake.secret(PUBLIC_CA).expect("kept");
    assert_eq!(public.data.as_ref().map(BTreeMap::len), Some(1));
    assert_eq!(value(&public, TLS_CA_KEY), text(&fake, CA_KEY, TLS_CA_KEY));
}

#[tokio::test]
async fn a_public_ca_secret_not_the_topologys_is_refused_and_left_alone() {
    let now = SystemTime::now();
    let mut public = auth::owned_secret(&topology(), labels::CLUSTER, PUBLIC_CA, TLS_CA_KEY, "x");
    public.metadata.owner_references = None;
    let fake = FakeSecrets::with([ca_secret_made(now), public.clone()]);
    let prepared = prepare_with(&fake, &[]).await;
    // The operator still connects: only applications' copy is missing.
    assert!(prepared.client.is_ok());
    assert_eq!(prepared.refused.len(), 1);
    assert!(prepared.refused[0].contains("Secret cache-ca exists and is not this topology's"));
    assert_eq!(fake.writes(), []);
    assert_eq!(fake.secret(PUBLIC_CA).map(|s| s.data), Some(public.data));
}

#[tokio::test]
async fn a_public_ca_secret_created_meanwhile_waits_for_the_next_reconcile() {
    let fake = FakeSecrets::with([ca_secret_made(SystemTime::now())]);
    let theirs = auth::owned_secret(&topology(), labels::CLUSTER, PUBLIC_CA, TLS_CA_KEY, "x");
    fake.rival_writes_first(theirs);
    let prepared = prepare_with(&fake, &[]).await;
    assert_eq!(prepared.refused, Vec::<String>::new());
    assert_eq!(text(&fake, PUBLIC_CA, TLS_CA_KEY).as_deref(), Some("x"));
}

/// [`member`] of `node` with the CA the fake holds, at `now`.
async fn member_at(
    fake: &FakeSecrets,
    node: &ValkeyNode,
    now: SystemTime,
) -> Result<Issued, SecretNotWritten> {
    member(fake, &cas_of(fake), node, FIELD_MANAGER, now).await
}

/// A fake holding the topology's CA and member `cache-0-0`'s certificate issued at `now`.
async fn with_member_issued(now: SystemTime) -> FakeSecrets {
    let fake = FakeSecrets::with([ca_secret_made(now)]);
    member_at(&fake, &node(Some("10.0.0.1")), now)
        .await
        .expect("issued");
    fake
}

#[tokio::test]
async fn a_member_without_its_clusterip_waits_without_a_certificate() {
    let fake = FakeSecrets::with([ca_secret_made(SystemTime::now())]);
    let issued = member_at(&fake, &node(None), SystemTime::now()).await;
    assert!(matches!(issued, Ok((None, None))), "{issued:?}");
    assert_eq!(fake.calls(), []);
}

#[tokio::test]
async fn a_new_member_is_issued_a_certificate_it_owns() {
    let fake = FakeSecrets::default();
    let prepared = prepare_with(&fake, &[]).await;
    assert!(prepared.client.is_ok());
    let prepared = prepare_with(&fake, &[node(Some("10.0.0.1"))]).await;
    assert_eq!(prepared.issued, ["cache-0-0: a new member"]);
    let secret = fake.secret(MEMBER_TLS).expect("created");
    assert_eq!(secret.owner_references()[0].uid, "node-uid");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(value(&secret, TLS_CA_KEY), text(&fake, CA_KEY, TLS_CA_KEY));
    assert!(value(&secret, TLS_CERT_KEY).is_some());
    assert!(value(&secret, TLS_KEY_KEY).is_some());
    // The operator's client wants the member to serve that certificate.
    let client = prepared.client.expect("a client");
    assert!(client.wanted.of(MEMBER).is_some());
}

#[tokio::test]
async fn the_expiry_is_the_earliest_of_the_members_certificates_and_the_ca() {
    let fake = FakeSecrets::default();
    let alone = prepare_with(&fake, &[]).await;
    let ca = cas_of(&fake).current.not_after();
    let managed = |not_after| {
        Some(Expiry {
            not_after,
            managed: true,
        })
    };
    assert_eq!(alone.expiry, managed(ca), "no member yet: the CA");
    let prepared = prepare_with(&fake, &[node(Some("10.0.0.1"))]).await;
    let cert = text(&fake, MEMBER_TLS, TLS_CERT_KEY).expect("issued");
    let leaf = cert_expiry::not_after(cert.as_bytes()).expect("readable");
    assert!(leaf < ca);
    assert_eq!(prepared.expiry, managed(leaf));
    // Without a usable CA, nothing is known.
    let gone = prepare_with(&FakeSecrets::default(), &[node(Some("10.0.0.1"))]).await;
    assert_eq!(gone.expiry, None);
}

#[tokio::test]
async fn a_valid_member_certificate_is_kept() {
    let now = SystemTime::now();
    let fake = with_member_issued(now).await;
    let before = fake.writes().len();
    let (cert, why) = member_at(&fake, &node(Some("10.0.0.1")), now)
        .await
        .expect("kept");
    assert_eq!(why, None);
    assert!(cert.is_some());
    assert_eq!(writes_since(&fake, before), []);
}

#[tokio::test]
async fn a_member_whose_address_changed_is_issued_again() {
    let now = SystemTime::now();
    let fake = with_member_issued(now).await;
    let before = text(&fake, MEMBER_TLS, TLS_CERT_KEY);
    let (_, why) = member_at(&fake, &node(Some("10.0.0.2")), now)
        .await
        .expect("issued");
    assert_eq!(
        why.as_deref(),
        Some("its certificate names another address")
    );
    assert_ne!(text(&fake, MEMBER_TLS, TLS_CERT_KEY), before);
    assert_eq!(
        fake.writes().last(),
        Some(&(Verb::Patch, MEMBER_TLS.into()))
    );
}

#[tokio::test]
async fn a_member_certificate_is_renewed_only_once_near_its_end() {
    let now = SystemTime::now();
    let fake = with_member_issued(now).await;
    let renew_at = now + LEAF_LIFETIME - RENEW_BEFORE;
    let node = node(Some("10.0.0.1"));
    let kept = member_at(&fake, &node, renew_at - days(1)).await;
    assert_eq!(kept.expect("kept").1, None);
    let (_, why) = member_at(&fake, &node, renew_at + days(1))
        .await
        .expect("renewed");
    let why = why.expect("renewed");
    assert!(why.starts_with("its certificate expires in"), "{why}");
}

#[tokio::test]
async fn a_damaged_member_secret_is_issued_again() {
    let now = SystemTime::now();
    let fake = with_member_issued(now).await;
    let mut damaged = fake.secret(MEMBER_TLS).expect("issued");
    damaged.data.as_mut().unwrap().remove(TLS_KEY_KEY);
    fake.put(damaged);
    let (_, why) = member_at(&fake, &node(Some("10.0.0.1")), now)
        .await
        .expect("issued");
    assert_eq!(
        why.as_deref(),
        Some("its key is missing or not its certificate's")
    );
    assert!(text(&fake, MEMBER_TLS, TLS_KEY_KEY).is_some());
}

#[tokio::test]
async fn a_member_certificate_of_another_ca_is_refused_not_replaced() {
    let now = SystemTime::now();
    let fake = with_member_issued(now).await;
    // The CA was replaced under the running member.
    fake.put(ca_secret_made(now));
    let before = fake.writes().len();
    let why = member_at(&fake, &node(Some("10.0.0.1")), now)
        .await
        .expect_err("refused");
    assert!(
        matches!(why, SecretNotWritten::ForeignCertificate(_)),
        "{why}"
    );
    assert!(
        why.to_string().contains("not from the topology's CA"),
        "{why}"
    );
    assert_eq!(writes_since(&fake, before), []);
}

#[tokio::test]
async fn a_member_secret_not_the_members_is_refused_and_left_alone() {
    let now = SystemTime::now();
    let earlier = foreign_owner("ValkeyNode", MEMBER, "earlier-node-uid");
    let cases = [
        (
            Some(earlier),
            "belongs to an earlier member of the same name",
            true,
        ),
        (
            Some(foreign_owner("Certificate", "x", "x")),
            "exists and is not this member's certificate",
            false,
        ),
        (None, "exists and is not this member's certificate", false),
    ];
    for (owner, expected, earlier) in cases {
        let mut theirs = member_secret(&node(None), MEMBER_TLS, &[]);
        theirs.metadata.owner_references = owner.map(|o| vec![o]);
        let fake = FakeSecrets::with([ca_secret_made(now), theirs.clone()]);
        let why = member_at(&fake, &node(Some("10.0.0.1")), now)
            .await
            .expect_err("refused");
        match earlier {
            true => assert!(
                matches!(why, SecretNotWritten::EarlierMembers { .. }),
                "{why}"
            ),
            false => assert!(
                matches!(why, SecretNotWritten::NotTheMembers { .. }),
                "{why}"
            ),
        }
        assert!(why.to_string().contains(expected), "{why}");
        assert_eq!(fake.writes(), []);
        assert_eq!(fake.secret(MEMBER_TLS).map(|s| s.data), Some(theirs.data));
    }
}

#[tokio::test]
async fn a_member_secret_written_meanwhile_is_not_written_over() {
    let now = SystemTime::now();
    // Created by another writer between the read and the create.
    let fake = FakeSecrets::with([ca_secret_made(now)]);
    let theirs = member_secret(&node(None), MEMBER_TLS, &[]);
    fake.rival_writes_first(theirs.clone());
    let why = member_at(&fake, &node(Some("10.0.0.1")), now).await;
    let why = why.expect_err("refused");
    assert!(matches!(why, SecretNotWritten::Api { .. }), "{why}");
    assert!(why.to_string().starts_with("Secret cache-0-0-tls: "));
    assert_eq!(fake.secret(MEMBER_TLS).map(|s| s.data), Some(theirs.data));
    // Changed by another writer between the read and the patch.
    let fake = with_member_issued(now).await;
    let changed = fake.secret(MEMBER_TLS).expect("issued");
    fake.rival_writes_first(changed.clone());
    let why = member_at(&fake, &node(Some("10.0.0.2")), now).await;
    let why = why.expect_err("refused");
    assert!(matches!(why, SecretNotWritten::Api { .. }), "{why}");
    assert!(why.to_string().starts_with("Secret cache-0-0-tls: "));
    assert_eq!(fake.secret(MEMBER_TLS).map(|s| s.data), Some(changed.data));
}

#[tokio::test]
async fn once_a_replacement_starts_members_are_issued_again_to_trust_both_cas() {
    let now = SystemTime::now();
    let fake = with_member_issued(now).await;
    let asking = asking();
    let ca = authority(&fake, &asking, labels::CLUSTER, true, FIELD_MANAGER, now).await;
    ca.expect("no API error").expect("a replacement");
    let (_, why) = member_at(&fake, &node(Some("10.0.0.1")), now)
        .await
        .expect("issued");
    assert_eq!(
        why.as_deref(),
        Some("its ca.crt is not the CA the topology trusts")
    );
    let trusted = cas_of(&fake).trusted();
    assert_eq!(text(&fake, MEMBER_TLS, TLS_CA_KEY), Some(trusted));
}

#[test]
fn a_replication_member_is_named_for_its_groups_services_too() {
    let mut data = node(None);
    assert_eq!(shared_services(&data), Vec::<String>::new());
    data.metadata.labels = Some([(labels::REPLICATION.into(), "group".into())].into());
    let services = shared_services(&data);
    assert_eq!(
        services,
        [
            names::primary_service_name("group"),
            names::replicas_service_name("group")
        ]
    );
    data.spec.mode = Mode::Sentinel;
    assert_eq!(
        shared_services(&data),
        [names::sentinel_service_name("group")]
    );
}

/// The operator's client for the fake's CA Secret as it is, with `overlap` for clients.
async fn client(fake: &FakeSecrets, overlap: Duration) -> Client {
    let topology = asking();
    let prepared = prepare(
        fake,
        &topology,
        labels::CLUSTER,
        &[],
        true,
        overlap,
        FIELD_MANAGER,
    );
    let prepared = prepared.await.expect("no API error");
    prepared.client.expect("a client")
}

/// The client for the fake as it is, with no overlap for clients.
async fn client_of(fake: &FakeSecrets) -> Client {
    client(fake, Duration::ZERO).await
}

/// A fake whose CA is being replaced (members trusting both), and the client that found it.
async fn replacing(overlap: Duration) -> (FakeSecrets, Client) {
    let fake = FakeSecrets::default();
    prepare_with(&fake, &[]).await;
    let client = client(&fake, overlap).await;
    assert!(client.replacement.is_some());
    (fake, client)
}

async fn advance_with(
    fake: &FakeSecrets,
    client: &Client,
    members: &[(&str, Option<&str>)],
) -> Advanced {
    let topology = topology();
    let advanced = advance(fake, &topology, client, members, FIELD_MANAGER);
    advanced.await.expect("no API error")
}

#[tokio::test]
async fn without_a_replacement_advance_reads_nothing() {
    let fake = FakeSecrets::default();
    let prepared = prepare_with(&fake, &[]).await;
    let calls = fake.calls().len();
    let advanced = advance_with(&fake, &prepared.client.expect("a client"), &[]).await;
    assert_eq!((advanced.done, advanced.status), (None, None));
    assert_eq!(fake.calls().len(), calls);
}

#[tokio::test]
async fn while_a_member_is_behind_the_replacement_waits_without_a_read() {
    let (fake, client) = replacing(Duration::ZERO).await;
    let calls = fake.calls().len();
    let advanced = advance_with(&fake, &client, &[(MEMBER, None)]).await;
    assert_eq!(advanced.done, None);
    let status = advanced.status.expect("under way");
    assert_eq!(status.phase, Phase::Trusting);
    let waiting = status.waiting_for.expect("why");
    assert!(waiting.contains("waiting for members to trust both CAs: cache-0-0"));
    assert_eq!(fake.calls().len(), calls);
}

#[tokio::test]
async fn members_switch_to_the_next_ca_only_once_clients_had_their_overlap() {
    let (fake, client) = replacing(ca_replacement::DEFAULT_OVERLAP).await;
    let before = fake.writes().len();
    let advanced = advance_with(&fake, &client, &[]).await;
    assert_eq!(advanced.done, None);
    assert!(advanced.status.and_then(|s| s.clients_until).is_some());
    assert_eq!(writes_since(&fake, before), []);
    // With no overlap left, the switch is taken and kept in the CA Secret.
    let client = Client {
        replacement: client.replacement.map(|r| ca_replacement::Replacement {
            overlap: Duration::ZERO,
            ..r
        }),
        ..client
    };
    let advanced = advance_with(&fake, &client, &[]).await;
    let done = advanced.done.expect("switched");
    assert!(done.starts_with("every member trusts both CAs"), "{done}");
    assert_eq!(advanced.status.map(|s| s.phase), Some(Phase::Switching));
    let ca = fake.secret(CA_KEY).expect("kept");
    assert_eq!(
        ca.annotations()[PHASE_ANNOTATION],
        ca_replacement::SWITCHING
    );
    let cas = cas_of(&fake);
    let next = cas.next.as_ref().expect("the next CA");
    assert_eq!(cas.issuing().cert_pem, next.authority.cert_pem);
}

#[tokio::test]
async fn once_members_serve_the_next_ca_it_becomes_the_ca() {
    let (fake, client) = replacing(Duration::ZERO).await;
    advance_with(&fake, &client, &[])
        .await
        .done
        .expect("switched");
    let next = text(&fake, CA_KEY, NEXT_CA_CERT_KEY).expect("the next CA");
    let next_key = text(&fake, CA_KEY, NEXT_CA_KEY_KEY).expect("its key");
    let client = client_of(&fake).await;
    let advanced = advance_with(&fake, &client, &[]).await;
    let done = advanced.done.expect("promoted");
    assert!(done.starts_with("every member serves a certificate of the next CA"));
    assert!(advanced.status.is_none());
    let ca = fake.secret(CA_KEY).expect("kept");
    assert_eq!(value(&ca, TLS_CA_KEY), Some(next));
    assert_eq!(value(&ca, CA_KEY_KEY), Some(next_key));
    assert_eq!(value(&ca, NEXT_CA_CERT_KEY), None);
    assert_eq!(value(&ca, NEXT_CA_KEY_KEY), None);
    assert!(!ca.annotations().contains_key(PHASE_ANNOTATION));
}

#[tokio::test]
async fn a_step_is_not_written_to_a_ca_secret_holding_another_next_ca() {
    let (fake, client) = replacing(Duration::ZERO).await;
    let mut changed = fake.secret(CA_KEY).expect("the CA");
    let other = Authority::generate("prod", "cache", SystemTime::now()).expect("a CA");
    let data = changed.data.as_mut().unwrap();
    data.insert(NEXT_CA_CERT_KEY.into(), bytes(&other.cert_pem));
    data.insert(NEXT_CA_KEY_KEY.into(), bytes(&other.key_pem));
    fake.put(changed);
    let before = fake.writes().len();
    let advanced = advance_with(&fake, &client, &[]).await;
    assert_eq!(advanced.done, None);
    let waiting = advanced.status.and_then(|s| s.waiting_for);
    assert!(waiting.is_some_and(|w| w.contains("changed meanwhile")));
    assert_eq!(writes_since(&fake, before), []);
}

#[tokio::test]
async fn a_step_on_a_ca_secret_written_between_read_and_write_fails() {
    let (fake, client) = replacing(Duration::ZERO).await;
    fake.rival_writes_first(fake.secret(CA_KEY).expect("the CA"));
    let advanced = advance(&fake, &topology(), &client, &[], FIELD_MANAGER).await;
    let Err(kube::Error::Api(status)) = advanced else {
        panic!("a conflict");
    };
    assert_eq!(status.code, 409);
    assert!(
        !fake
            .secret(CA_KEY)
            .unwrap()
            .annotations()
            .contains_key(PHASE_ANNOTATION)
    );
}
