//! Test support for the planner and status (layers 4 and 5): a small simulated cluster.
//! Every member sees the same CLUSTER NODES (with its own `myself`), unless a test edits one
//! view.

use crd_types::conditions::reasons::Waiting;
use crd_types::names::cluster_member_name;

use crate::cluster::cluster_nodes::ClusterView;
use crate::cluster::model::{Member, Position, Reply, Shape};
use crate::cluster::plan::{Step, next_step};
use crate::cluster::slots::{self, SlotRange, even_split};
use crate::shared::fake::settled_revisions;
use crate::shared::info::ReplicationInfo;
use crate::shared::member_facts::{Address, Revisions};

/// One simulated member.
#[derive(Clone)]
pub struct Sim {
    pub shard: u32,
    pub member: u32,
    /// Valkey node id; `None` while the member does not answer.
    pub id: Option<String>,
    /// Primary id when a replica.
    pub follows: Option<String>,
    pub slots: Vec<SlotRange>,
    pub ready: bool,
    pub revisions: Revisions,
    /// Extra flags on this node's line, as every view shows it ("fail", ...).
    pub flags: &'static str,
    pub synced: bool,
    pub offset: i64,
    /// Open-slot markers on its own line ("[42->-<id>]").
    pub markers: String,
    /// What CLUSTER INFO says (`None`: not asked).
    pub state_ok: Option<bool>,
    /// What Kubernetes knows of its server being down ([`Member::gone`]).
    pub gone: Option<String>,
}

pub fn ip(shard: u32, member: u32) -> String {
    format!("10.0.{shard}.{member}")
}

pub fn id(shard: u32, member: u32) -> String {
    format!("{:0>40}", format!("{shard}{member}"))
}

pub fn sim(shard: u32, member: u32) -> Sim {
    Sim {
        shard,
        member,
        id: Some(id(shard, member)),
        follows: None,
        slots: vec![],
        ready: true,
        revisions: settled_revisions(),
        flags: "",
        synced: true,
        offset: 100,
        markers: String::new(),
        state_ok: Some(true),
        gone: None,
    }
}

/// A formed cluster: member 0 primary of each shard with the even split, others replicas.
pub fn formed(shards: u32, replicas: u32) -> Vec<Sim> {
    let split = even_split(shards as usize);
    let mut out = vec![];
    for shard in 0..shards {
        for member in 0..=replicas {
            let mut m = sim(shard, member);
            if member == 0 {
                m.slots = split[shard as usize].clone();
            } else {
                m.follows = Some(id(shard, 0));
            }
            out.push(m);
        }
    }
    out
}

pub fn line(s: &Sim, myself: bool) -> Option<String> {
    let id = s.id.as_ref()?;
    let mut flags = vec![];
    if myself {
        flags.push("myself");
    }
    flags.push(if s.follows.is_some() {
        "slave"
    } else {
        "master"
    });
    if !s.flags.is_empty() {
        flags.push(s.flags);
    }
    let slots: Vec<String> = s.slots.iter().map(|r| slots::format_range(*r)).collect();
    let mut text = format!(
        "{id} {}:6379@16379 {} {} 0 0 1 connected {}",
        ip(s.shard, s.member),
        flags.join(","),
        s.follows.as_deref().unwrap_or("-"),
        slots.join(" ")
    );
    if myself && !s.markers.is_empty() {
        text.push(' ');
        text.push_str(&s.markers);
    }
    Some(text.trim_end().to_string())
}

pub fn members(sims: &[Sim]) -> Vec<Member> {
    members_with(sims, |_, _| true)
}

/// Members whose views list only the nodes `knows(viewer, node)` allows.
pub fn members_with(sims: &[Sim], knows: impl Fn(&Sim, &Sim) -> bool) -> Vec<Member> {
    sims.iter()
        .map(|me| {
            // A failed node, or one whose server is gone, does not answer.
            let answers = me.flags != "fail" && me.gone.is_none();
            let reply = me.id.as_ref().filter(|_| answers).map(|_| {
                let text: Vec<String> = sims
                    .iter()
                    .filter(|other| std::ptr::eq(*other, me) || knows(me, other))
                    .filter_map(|other| line(other, std::ptr::eq(other, me)))
                    .collect();
                let replication = match &me.follows {
                    Some(p) => {
                        let primary = sims.iter().find(|s| s.id.as_deref() == Some(p)).unwrap();
                        format!(
                            "role:slave\nmaster_host:{}\nmaster_port:6379\nmaster_link_status:{}\n\
                             master_sync_in_progress:0\nslave_repl_offset:{}\nconnected_slaves:0\n\
                             master_repl_offset:{}\n",
                            ip(primary.shard, primary.member),
                            if me.synced { "up" } else { "down" },
                            me.offset,
                            me.offset
                        )
                    }
                    None => {
                        // Its replicas as it reports them: online once in sync.
                        let followers: Vec<&Sim> = sims
                            .iter()
                            .filter(|r| r.id.is_some() && r.follows == me.id)
                            .collect();
                        let mut text =
                            format!("role:master\nconnected_slaves:{}\n", followers.len());
                        for (i, r) in followers.iter().enumerate() {
                            // From its pod IP: in cluster mode a replica does not send its
                            // announced address to its primary.
                            text.push_str(&format!(
                                "slave{i}:ip=10.1.{}.{},port=6379,state={},offset={},lag=0\n",
                                r.shard,
                                r.member,
                                if r.synced { "online" } else { "wait_bgsave" },
                                r.offset
                            ));
                        }
                        text + &format!("master_repl_offset:{}\n", me.offset)
                    }
                };
                Reply {
                    view: ClusterView::parse(&text.join("\n")).unwrap(),
                    replication: ReplicationInfo::parse(&replication).unwrap(),
                    shard_groups: None,
                    cluster_state_ok: me.state_ok,
                    live_config: None,
                    slot_jobs: None,
                    replication_user: None,
                }
            });
            Member {
                name: cluster_member_name("c", me.shard, me.member),
                at: Position {
                    shard: me.shard,
                    member: me.member,
                },
                address: Some(Address {
                    ip: ip(me.shard, me.member),
                    port: 6379,
                    bus_port: 16379,
                }),
                ready: me.ready,
                revisions: me.revisions.clone(),
                reply,
                gone: me.gone.clone(),
            }
        })
        .collect()
}

pub fn shape(shards: u32, replicas: u32) -> Shape {
    Shape {
        cluster: "c".into(),
        shards,
        replicas_per_shard: replicas,
        switchover: None,
        config: crate::cluster::model::member_config(&Default::default()),
        image: crd_types::template::DEFAULT_IMAGE.into(),
        atomic_migration: true,
        replication_password: None,
    }
}

pub fn step(d: &Shape, sims: &[Sim]) -> Step {
    next_step(d, &members(sims), None)
}

/// The reason and message of a wait; panics on any other step.
pub fn wait_of(step: Step) -> (Waiting, String) {
    match step {
        Step::Wait { reason, message } => (reason, message),
        other => panic!("not a wait: {other:?}"),
    }
}
