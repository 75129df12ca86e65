//! What carrying out a step means in every topology: the member ValkeyNodes a step changes
//! (through [`MemberObjects`], which the binary implements with the API server), live
//! directives set, and the `replication` user created.

use std::future::Future;

use crd_types::template::REPLICATION_USER;

use crate::shared::acl::ReplicationPassword;
use crate::shared::commands::{CommandResultExt, Server, StepError};
use crate::shared::connections::Connections;

/// The member ValkeyNodes, as a step changes them.
pub trait MemberObjects: Sync {
    /// Deletes the member's ValkeyNode (its PVC follows its reclaim policy).
    fn delete(&self, member: &str) -> impl Future<Output = Result<(), StepError>> + Send;

    /// Opens the member's roll gate for `revision`.
    fn allow_roll(
        &self,
        member: &str,
        revision: &str,
    ) -> impl Future<Output = Result<(), StepError>> + Send;
}

/// `CONFIG SET` of each member's pairs (a `SetConfig` step, of either topology). Stops at the
/// first refusal: the next reconcile compares again and sets what is still off.
pub async fn set_config<V: Server>(
    changes: &[(String, Vec<(String, String)>)],
    conns: &Connections<V>,
) -> Result<(), StepError> {
    for (member, pairs) in changes {
        let conn = conns.get(member)?;
        for (name, value) in pairs {
            conn.config_set(name, value)
                .await
                .on(format!("CONFIG SET {name} {value}"), member)?;
        }
    }
    Ok(())
}

/// `ACL SETUSER replication` on each member (a `CreateReplicationUser` step, of either
/// topology). Stops at the first refusal: the next reconcile reads the users again.
pub async fn create_replication_user<V: Server>(
    members: &[(String, bool)],
    password: &ReplicationPassword,
    conns: &Connections<V>,
) -> Result<(), StepError> {
    for (member, atomic_migration) in members {
        conns
            .get(member)?
            .acl_setuser(REPLICATION_USER, &password.setuser_rules(*atomic_migration))
            .await
            .on(format!("ACL SETUSER {REPLICATION_USER}"), member)?;
    }
    Ok(())
}
