//! Event reasons every topology kind publishes the same way: its NetworkPolicy, `spec.users`,
//! password rotations and certificates. Each kind's own steps have their own reasons
//! ([`crate::cluster::events`], [`crate::replication::events`]).

operator_runtime::event_reasons! {
    /// Event reasons on a ValkeyCluster or a ValkeyReplication that are not a step's.
    pub enum TopologyEvent {
        /// The topology's NetworkPolicy could not be applied (a peer the API server refuses,
        /// or a missing RBAC rule); the note says why. The members are looked after anyway.
        NetworkPolicyRefused: Warning,
        /// The PodMonitor `spec.monitoring.podMonitor` asks for cannot be applied (no
        /// PodMonitor CRD, a missing RBAC rule, a name taken); the note says why. Told once
        /// per change of reason.
        PodMonitorNotApplied: Warning,
        /// `spec.users` were set (`ACL SETUSER`) or users it does not list deleted on data
        /// nodes; the note says which, where.
        UsersApplied: Normal,
        /// A user of `spec.users` could not be applied as asked (rules a Valkey version
        /// refuses, a missing password Secret); the note says why. Told once per change.
        UsersRefused: Warning,
        /// A changed default password was added on data nodes next to the previous one
        /// (`ACL SETUSER default`); the note says which, and until when both work.
        DefaultPasswordAdded: Normal,
        /// The overlap ended: members keep only the new password (the default one, the
        /// sentinels' or the operator's); the note says which.
        PreviousPasswordDropped: Normal,
        /// A data node refused a change of the default password; the note says which and
        /// its answer. The next pass tries again.
        DefaultPasswordRefused: Warning,
        /// A changed operator password was added on members next to the previous one
        /// (`ACL SETUSER operator`, and `replication` on data nodes); the note says which,
        /// and until when both work.
        OperatorPasswordAdded: Normal,
        /// Members log in to each other with the new operator password (`masterauth`;
        /// a sentinel's `auth-pass` and `sentinel-pass`); the note says which.
        OperatorLoginsSwitched: Normal,
        /// A member refused a change of the operator password; the note says which and
        /// its answer. The next pass tries again.
        OperatorPasswordRefused: Warning,
        /// The operator's CA issued certificates (`spec.tls` without a Secret): to new
        /// members, and again before expiry or after an address change; the note says which.
        CertificateIssued: Normal,
        /// Members loaded a renewed TLS Secret (`CONFIG SET tls-cert-file`); the note says
        /// which.
        CertificateReloaded: Normal,
        /// The TLS Secret cannot be used (missing, or a certificate members could not use),
        /// a member refused to load its files, serves a certificate its `ca.crt` does not
        /// accept, or has a Secret of its certificate's name the operator may not write;
        /// the note says which and why.
        CertificateRefused: Warning,
    }
}
