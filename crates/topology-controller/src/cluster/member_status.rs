//! Status (layer 5): a cluster member's `status.valkey`, from what its Valkey answered.

use crd_types::node::ValkeyStatus;

use crate::cluster::model::Member;

/// `status.valkey` of a member that answered; `version` from INFO server.
pub fn member_status(member: &Member, version: Option<&str>) -> Option<ValkeyStatus> {
    let reply = member.reply.as_ref()?;
    Some(ValkeyStatus {
        node_id: member.id().map(str::to_string),
        role: Some(reply.replication.role),
        primary_node_id: member.primary_id().map(str::to_string),
        replication_offset: Some(member.offset()),
        link_up: reply.replication.primary.as_ref().map(|l| l.link_up),
        version: version.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::sim::*;

    #[test]
    fn a_replica_reports_its_primary_and_offset() {
        let mut sims = formed(1, 1);
        sims[1].offset = 42;
        let m = members(&sims);
        let status = member_status(&m[1], Some("8.0.1")).unwrap();
        assert_eq!(status.node_id, Some(id(0, 1)));
        assert_eq!(status.role, Some(crd_types::node::Role::Replica));
        assert_eq!(status.primary_node_id, Some(id(0, 0)));
        assert_eq!(status.replication_offset, Some(42));
        assert_eq!(status.link_up, Some(true));
        assert_eq!(status.version.as_deref(), Some("8.0.1"));
        sims[1].id = None;
        assert_eq!(member_status(&members(&sims)[1], None), None);
    }
}
