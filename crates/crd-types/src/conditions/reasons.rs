//! Condition reasons as API types: one enum per condition type, each variant a CamelCase
//! string that alerts, dashboards and `kubectl wait --for=jsonpath=...` can match on.
//!
//! [`ConditionSpec::new`](super::ConditionSpec::new) takes a reason and derives the condition
//! type from it, so a reason can only ever be written under its own type.
//! docs/status-conditions.md lists every type and reason; `tests/reasons_doc.rs` keeps it
//! equal to these enums.

use super::types;
use crate::cluster::Phase;

/// A condition reason: the enum it belongs to names its condition type.
pub trait Reason: Copy {
    /// The condition type this reason is written under.
    const TYPE: &'static str;
    /// The reason as written in the condition.
    fn as_str(self) -> &'static str;
}

/// One reason enum: the variant name is the reason, its doc comment its meaning.
macro_rules! reasons {
    (
        $(#[doc = $doc:literal])*
        $name:ident for $type_:path {
            $( $(#[doc = $vdoc:literal])+ $variant:ident, )+
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[doc = $vdoc])+ $variant, )+
        }

        impl $name {
            /// Every reason of this type, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                }
            }

            /// What the reason means, for people (the variant's doc comment).
            pub fn meaning(self) -> &'static str {
                match self {
                    $($name::$variant => concat!($($vdoc),+).trim_start(),)+
                }
            }
        }

        impl Reason for $name {
            const TYPE: &'static str = $type_;
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

reasons! {
    /// `ConfigValid` (node-controller): the spec renders to a config Valkey accepts.
    ConfigValid for types::CONFIG_VALID {
        /// The spec renders to a valid config.
        Valid,
        /// `spec.config` sets a directive the operator owns (in any letter case).
        OwnedDirective,
        /// `spec.config` holds a directive name or value that cannot be written safely.
        InvalidDirective,
        /// `spec.config` names a directive the image's Valkey version does not know, so a
        /// server would refuse to start with it.
        UnknownDirective,
    }
}

reasons! {
    /// `WorkloadReady` (node-controller): the pod runs and its valkey container passes its
    /// readiness probe.
    WorkloadReady for types::WORKLOAD_READY {
        /// The valkey container answers PING.
        PodReady,
        /// `announce: Service` and service-controller has not published the ClusterIP yet.
        WaitingForEndpoint,
        /// No workload: the config is invalid (see ConfigValid).
        ConfigInvalid,
        /// The StatefulSet or Deployment is being created.
        WorkloadMissing,
        /// The workload has no pod yet.
        PodMissing,
        /// The current pod is being deleted.
        PodTerminating,
        /// The node's PersistentVolumeClaim is not Bound, so the pod cannot start.
        ClaimNotBound,
        /// The valkey container is waiting (image pull, missing Secret, crash loop back-off).
        ContainerWaiting,
        /// The valkey container's last start failed for a program its image lacks (`sh`,
        /// `awk`, `valkey-cli`...; docs/images.md): the message names it.
        ImageIncomplete,
        /// The pod is not scheduled or not started yet.
        PodPending,
        /// The pod runs but does not answer PING yet (starting or loading its data).
        PodNotReady,
    }
}

reasons! {
    /// `RollPending` (node-controller): a template change waits for the parent's roll gate.
    RollPending for types::ROLL_PENDING {
        /// The spec cannot be rendered yet, so there is nothing to roll to.
        NoDesiredRevision,
        /// `rolloutPolicy: Gated` and `spec.allowedRevision` does not name the new revision.
        WaitingForAllowedRevision,
        /// The pod runs the revision the spec asks for.
        UpToDate,
        /// The new revision is applied and the pod is being replaced.
        Rolling,
    }
}

reasons! {
    /// `ClaimSize` (node-controller): the node's claim requests at least `persistence.size`.
    /// node-controller creates the claim at that size and never changes it; pvc-resizer grows
    /// it, so without pvc-resizer a larger spec stays `SmallerThanSpec`.
    ClaimSize for types::CLAIM_SIZE {
        /// The claim requests at least the spec's size.
        MatchesSpec,
        /// The spec asks for more than the claim requests; pvc-resizer grows it (without
        /// pvc-resizer deployed, grow the claim by hand).
        SmallerThanSpec,
    }
}

reasons! {
    /// `StorageReady` (pvc-resizer): the volume has the size the spec asks for and, with
    /// `autoResize`, the room its usage needs.
    StorageReady for types::STORAGE_READY {
        /// Bound at the requested size, and usage (with autoResize) is below the threshold.
        VolumeReady,
        /// node-controller has not created the claim yet.
        ClaimMissing,
        /// The claim is not Bound yet.
        ClaimNotBound,
        /// A larger size was requested; the storage driver is growing the volume.
        Resizing,
        /// The volume grew; the kubelet grows the file system (online, or when the pod
        /// restarts).
        FileSystemResizePending,
        /// Usage is above the threshold and the claim reached `autoResize.limit`: raise the
        /// limit or free space.
        LimitReached,
        /// The volume must grow and its StorageClass does not set `allowVolumeExpansion`.
        NotExpandable,
        /// A ResourceQuota refused the larger size: raise the quota.
        QuotaExceeded,
        /// The API server refused the larger size for another reason (see the message).
        ResizeRefused,
        /// The storage driver reported an error growing the volume (`ControllerResizeError`
        /// or `NodeResizeError` on the claim).
        ResizeFailed,
        /// Usage is above the threshold and the last growth was less than
        /// `autoResize.cooldownSeconds` ago.
        CoolingDown,
        /// autoResize is on and the kubelet's volume stats of the pod's Node cannot be read.
        UsageUnknown,
        /// `autoResize` holds a value pvc-resizer cannot use (see the message); it grows the
        /// claim only to the spec's size.
        InvalidAutoResize,
    }
}

reasons! {
    /// `EndpointReady` (service-controller): the node's Service exists and has a ClusterIP.
    EndpointReady for types::ENDPOINT_READY {
        /// The Service has its ClusterIP, published in `status.endpoint`.
        ServiceReady,
        /// The Service has no ClusterIP yet.
        ServicePending,
        /// A Service of the node's name exists that the node does not control; it is left alone.
        ServiceNotOwned,
    }
}

reasons! {
    /// `Ready` (topology-controller): the topology serves with the shape its spec asks for.
    /// While not ready the reason is the phase.
    TopologyReady for types::READY {
        /// Every shard serves with all its members ready and in sync, all slots assigned.
        ClusterReady,
        /// The primary serves, every replica is linked to it and every sentinel monitors it.
        ReplicationReady,
        /// Members are being created and joined; never ready yet.
        Creating,
        /// Shards or members are being added or removed.
        Scaling,
        /// Members are rolling to a new template. (Directives set live, `CONFIG SET`, keep
        /// a Ready topology Ready: its members serve throughout, and an operator upgrade that
        /// brings a new default runs the same step.)
        Updating,
        /// Serving, but a member, a shard or the slot map is not healthy.
        Degraded,
        /// Not serving.
        Failed,
        /// Paused (`valkey.rs/paused`): the status (True or False) is the last one seen
        /// before the pause; nothing is looked at until it is removed.
        Paused,
    }
}

reasons! {
    /// Why topology-controller waits instead of taking a step: the reason of `Progressing`
    /// (status False) while it waits.
    Waiting for types::PROGRESSING {
        /// The `valkey.rs/paused` annotation is set: no step is taken until it is removed.
        Paused,
        /// No member's Valkey answers yet.
        NoMemberAnswers,
        /// A new topology forms only once every member answers.
        Forming,
        /// A member the next step needs has no ValkeyNode yet.
        MemberMissing,
        /// A shard has no primary to attach replicas to or to move slots to.
        ShardWithoutPrimary,
        /// Two members of one shard hold slots; resolve by hand.
        TwoPrimariesInShard,
        /// A slot is left open by an interrupted move and one of its ends does not answer.
        SlotEndUnreachable,
        /// Slots belong to a Valkey node that is no member.
        SlotsOwnedByStranger,
        /// The slot plan cannot be made from the current ownership.
        SlotPlanImpossible,
        /// A primary slots must move from or to is not ready or does not answer.
        MigrationEndNotReady,
        /// A replica of a primary a slot moves from or to is not online, so it would miss
        /// the move's final slot state (Valkey copies it only to online replicas).
        ReplicaNotSynced,
        /// Members' views of the cluster (membership or slot owners) differ, or a replica does
        /// not know its primary yet.
        MembersDisagree,
        /// A member to remove still holds slots.
        MemberHoldsSlots,
        /// A primary must hand over first and no wanted replica is in sync to take over.
        NoReplicaInSync,
        /// node-controller has not rendered a member's current spec yet.
        SpecNotRendered,
        /// A member allowed to roll is not yet ready and in sync again.
        MemberRolling,
        /// A member must be ready before the next member rolls.
        MemberNotReady,
        /// A ValkeyNode with a member's name belongs to something else; it is never taken over.
        ForeignMember,
        /// The operator user's password cannot be read, so no member is asked.
        NoOperatorPassword,
        /// The TLS Secret cannot be used (missing, a key missing, or not a certificate and
        /// its key), so no member is asked.
        TlsSecretUnusable,
        /// The default user's password cannot be read, so no member restarts.
        DefaultPasswordUnreadable,
        /// A member refuses the operator user's login.
        LoginRefused,
        /// No data node can be named primary: the sentinels do not agree on one and no single
        /// data node serves as primary.
        NoPrimary,
        /// Sentinels have not yet seen what the next step needs (a replica's priority, or the
        /// replicas and sentinels they find again after a reset), or one runs a failover (or
        /// does not answer, so may run one) that the next step would disturb.
        SentinelsCatchingUp,
        /// The template's image runs a Valkey version that cannot take over the members'
        /// data (a downgrade past a data format).
        VersionRefused,
        /// The config names a directive the template image's Valkey version does not know.
        DirectiveUnknown,
        /// Slots would move to a member whose Valkey cannot read the source's newer data
        /// format; they wait for the upgrade to reach it.
        MigrationAcrossVersions,
        /// An atomic slot migration job runs on a member (Valkey 9.0+); nothing else moves or
        /// restarts until it ends.
        SlotsMovingAtomically,
        /// A step was taken again and again and changed nothing the members show (or a
        /// heal tried every method): it is not taken again until something changes.
        NoProgress,
    }
}

impl Waiting {
    /// Waits that are part of a planned roll, so the phase reads Updating, not Degraded.
    pub fn is_roll(self) -> bool {
        matches!(self, Waiting::MemberRolling | Waiting::SpecNotRendered)
    }

    /// Waits that are part of moving slots, so the phase reads Scaling, not Degraded.
    pub fn is_scaling(self) -> bool {
        matches!(
            self,
            Waiting::SlotsMovingAtomically | Waiting::MigrationAcrossVersions
        )
    }

    /// Waits on a spec the operator refuses to roll out: each is also a Warning Event.
    pub fn is_refusal(self) -> bool {
        matches!(self, Waiting::VersionRefused | Waiting::DirectiveUnknown)
    }
}

/// `Progressing` (topology-controller): True while a step runs (the reason is the phase it
/// serves), False when idle or waiting (the reason says why).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Progressing {
    /// Everything is as the spec asks.
    Idle,
    /// A step runs; the phase says what for.
    Step(Phase),
    /// Nothing can be done until something changes.
    Waiting(Waiting),
}

impl Progressing {
    /// Every reason `Progressing` can carry.
    pub fn all() -> Vec<Progressing> {
        // A step after formation always scales or updates: no step runs as Degraded.
        let phases = [Phase::Creating, Phase::Scaling, Phase::Updating];
        std::iter::once(Progressing::Idle)
            .chain(phases.into_iter().map(Progressing::Step))
            .chain(Waiting::ALL.iter().copied().map(Progressing::Waiting))
            .collect()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Progressing::Idle => "Idle",
            Progressing::Step(phase) => phase.as_str(),
            Progressing::Waiting(w) => w.as_str(),
        }
    }

    pub fn meaning(self) -> &'static str {
        match self {
            Progressing::Idle => "Everything is as the spec asks.",
            Progressing::Step(Phase::Creating) => "A step forming the topology runs.",
            Progressing::Step(Phase::Scaling) => "A step adding or removing members or slots runs.",
            Progressing::Step(Phase::Updating) => {
                "A step of a roll or switchover runs, or one setting directives live (Ready stays True for those)."
            }
            Progressing::Step(_) => "A step runs.",
            Progressing::Waiting(w) => w.meaning(),
        }
    }
}

impl Reason for Progressing {
    const TYPE: &'static str = types::PROGRESSING;
    fn as_str(self) -> &'static str {
        Progressing::as_str(self)
    }
}

impl From<Waiting> for Progressing {
    fn from(w: Waiting) -> Self {
        Progressing::Waiting(w)
    }
}

reasons! {
    /// `Degraded` (topology-controller): the topology formed once and is not healthy now.
    Degraded for types::DEGRADED {
        /// Not degraded: the topology is healthy, or has not formed yet (see Ready).
        Healthy,
        /// Wanted members are not ready or do not answer.
        MembersNotReady,
        /// Valkey lists nodes that are no member (removed ones count until forgotten).
        UnknownNodes,
        /// A replica keeps a slot marker (importing or migrating) its primary does not have;
        /// promoted, it would serve with a stale migration state.
        StaleSlotMarker,
        /// Some shard is not ready: its primary unhealthy or a replica not in sync.
        ShardsNotReady,
        /// No data node serves as the one primary the sentinels name.
        NoPrimary,
        /// A replica is not linked to the primary, or is resyncing.
        ReplicasNotLinked,
        /// A sentinel does not monitor the primary, names another one, or lists members that
        /// are gone.
        SentinelsNotMonitoring,
    }
}

reasons! {
    /// `UsersReady` (topology-controller, with `spec.users`): every data node has the
    /// spec's users with their current passwords, and no other user of its own.
    UsersReady for types::USERS_READY {
        /// Every data node has exactly the spec's users.
        UsersApplied,
        /// Some data node does not answer or has not taken the users yet.
        UsersApplying,
        /// A Valkey version the topology runs refuses a user's rules; that user keeps its
        /// previous rules (or does not exist yet). The message has the server's answer.
        RulesRefused,
        /// A user's password Secret or key is missing; that user keeps its previous
        /// password (or does not exist yet).
        PasswordMissing,
        /// The `<topology>-users` Secret exists and is not the topology's (made by hand, or
        /// another object's): the operator leaves it alone, and applies no user until it is
        /// deleted or renamed.
        UsersSecretTaken,
    }
}

reasons! {
    /// `PodMonitorReady` (topology-controller, with `spec.monitoring.podMonitor`): the
    /// topology's PodMonitor for its exporters is applied.
    PodMonitorReady for types::POD_MONITOR_READY {
        /// The PodMonitor `<topology>-exporters` is applied as the spec asks.
        PodMonitorApplied,
        /// The monitoring.coreos.com/v1 PodMonitor CRD is not installed (prometheus-operator
        /// is absent); nothing is scraped until it is, and the operator looks again.
        CrdMissing,
        /// The API server refused the PodMonitor (its message says why: a missing RBAC
        /// rule, an admission policy), or an object of that name is not the topology's.
        PodMonitorRefused,
    }
}

reasons! {
    /// `SlotsAssigned` (topology-controller): all 16384 slots have an owner and none is open.
    SlotsAssigned for types::SLOTS_ASSIGNED {
        /// Every slot has an owner and no slot is importing or migrating.
        AllSlotsAssigned,
        /// Some slot has no owner or is open.
        SlotsMissing,
    }
}

impl From<Phase> for TopologyReady {
    fn from(phase: Phase) -> Self {
        match phase {
            Phase::Ready => TopologyReady::ClusterReady,
            Phase::Creating => TopologyReady::Creating,
            Phase::Scaling => TopologyReady::Scaling,
            Phase::Updating => TopologyReady::Updating,
            Phase::Degraded => TopologyReady::Degraded,
            Phase::Failed => TopologyReady::Failed,
            Phase::Paused => TopologyReady::Paused,
        }
    }
}

/// One row of the reference table: condition type, reason, meaning.
pub type Row = (&'static str, &'static str, &'static str);

/// Every condition type and reason the operator writes, in the order of the reference table.
pub fn table() -> Vec<Row> {
    fn rows<R: Reason>(all: &[R], meaning: impl Fn(R) -> &'static str) -> Vec<Row> {
        all.iter()
            .map(|r| (R::TYPE, r.as_str(), meaning(*r)))
            .collect()
    }
    [
        rows(ConfigValid::ALL, ConfigValid::meaning),
        rows(WorkloadReady::ALL, WorkloadReady::meaning),
        rows(RollPending::ALL, RollPending::meaning),
        rows(ClaimSize::ALL, ClaimSize::meaning),
        rows(EndpointReady::ALL, EndpointReady::meaning),
        rows(StorageReady::ALL, StorageReady::meaning),
        rows(TopologyReady::ALL, TopologyReady::meaning),
        rows(&Progressing::all(), Progressing::meaning),
        rows(Degraded::ALL, Degraded::meaning),
        rows(SlotsAssigned::ALL, SlotsAssigned::meaning),
        rows(UsersReady::ALL, UsersReady::meaning),
        rows(PodMonitorReady::ALL, PodMonitorReady::meaning),
    ]
    .concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_their_variant_names_and_carry_their_type() {
        assert_eq!(WorkloadReady::ClaimNotBound.as_str(), "ClaimNotBound");
        assert_eq!(<WorkloadReady as Reason>::TYPE, "WorkloadReady");
        assert_eq!(
            Progressing::from(Waiting::LoginRefused).as_str(),
            "LoginRefused"
        );
        assert_eq!(Progressing::Step(Phase::Scaling).as_str(), "Scaling");
        assert_eq!(
            WorkloadReady::PodReady.meaning(),
            "The valkey container answers PING."
        );
    }

    #[test]
    fn no_reason_is_listed_twice_under_one_type() {
        let table = table();
        let mut seen = std::collections::BTreeSet::new();
        for (type_, reason, meaning) in &table {
            assert!(seen.insert((*type_, *reason)), "{type_}/{reason} twice");
            assert!(!meaning.is_empty(), "{type_}/{reason} has no meaning");
            assert!(
                reason
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
                    && reason.chars().all(|c| c.is_ascii_alphanumeric()),
                "{reason} is not CamelCase"
            );
        }
    }
}
