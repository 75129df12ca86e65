//! Status of a password rotation under way on a topology's data nodes or sentinels
//! (topology-controller).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whose password a [`PasswordRotation`] rotates.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RotatedPassword {
    /// The data nodes' default user.
    #[serde(rename = "default")]
    DataNodesDefault,
    /// A ValkeyReplication's sentinels' default user (their own password Secret). No
    /// `spec.users` name can be it: those have no `/`.
    #[serde(rename = "sentinels/default")]
    SentinelsDefault,
    /// The `operator` user's password on every member (with the `replication` user's,
    /// derived from it). `spec.users` cannot take that name.
    #[serde(rename = "operator")]
    Operator,
}

impl RotatedPassword {
    /// As status writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DataNodesDefault => "default",
            Self::SentinelsDefault => "sentinels/default",
            Self::Operator => "operator",
        }
    }
}

/// A password rotation under way: the new password works on `membersWithNew` of `members`
/// data nodes (or sentinels), next to the previous one, which goes once every one of them
/// has the new one and the overlap has run from `since`. Absent when no rotation is under
/// way.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordRotation {
    /// Whose password: `default` (the data nodes' default user), `sentinels/default` (the
    /// sentinels' default user) or `operator` (the operator user's, on every member).
    pub user: RotatedPassword,
    /// When the new password last reached a member that lacked it: the overlap counts from
    /// here.
    pub since: Time,
    /// When the previous password goes, if every member has the new one by then.
    pub previous_until: Time,
    /// Members (data nodes, or sentinels) that answered and take the new password.
    pub members_with_new: i32,
    /// Members of the topology: its data nodes, or its sentinels (both for `operator`).
    pub members: i32,
    /// The password Secret and its resourceVersion the rotation goes to
    /// (`<name>/<resourceVersion>`): a Secret changed again, even back to the previous
    /// password, starts the overlap again.
    pub secret_version: String,
    /// Members holding back the previous password's end: not answering, or still on an
    /// older operator's pod template (their readiness probe, or for `operator` their hooks,
    /// log in with the password they started with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_back_by: Vec<String>,
}

/// Where a CA replacement stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CaReplacementPhase {
    /// Members are given both CAs to trust; certificates still come from the current one.
    Trusting,
    /// Members are issued certificates of the new CA.
    Switching,
}

/// A replacement of the CA the operator keeps for the topology (`spec.tls` without a
/// Secret; docs/ca-replacement.md), while under way. Absent otherwise.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaReplacement {
    /// `Trusting`: members are given both CAs to trust, certificates still come from the
    /// current one. `Switching`: members are issued certificates of the new CA.
    pub phase: CaReplacementPhase,
    /// When `<name>-ca` first held both CAs: clients trusting only the old one must read it
    /// again from here on.
    pub started: Time,
    /// While `Trusting`: when members may start serving certificates of the new CA (the
    /// end of `tls.caOverlapSeconds`), if every member trusts both by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients_until: Option<Time>,
    /// What the next step waits for, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_password_reads_in_status_as_it_is_written() {
        for user in [
            RotatedPassword::DataNodesDefault,
            RotatedPassword::SentinelsDefault,
            RotatedPassword::Operator,
        ] {
            let json = serde_json::to_value(user).unwrap();
            assert_eq!(json, serde_json::Value::from(user.as_str()));
            assert_eq!(
                serde_json::from_value::<RotatedPassword>(json).unwrap(),
                user
            );
        }
        let phase = serde_json::to_value(CaReplacementPhase::Switching).unwrap();
        assert_eq!(phase, serde_json::Value::from("Switching"));
    }
}
