//! Status of a password rotation under way on a topology's data nodes (topology-controller).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A password rotation under way: the new password works on `membersWithNew` of `members`
/// data nodes, next to the previous one, which goes once every data node has the new one
/// and the overlap has run from `since`. Absent when no rotation is under way.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordRotation {
    /// Whose password: `default`.
    pub user: String,
    /// When the new password last reached a data node that lacked it: the overlap counts
    /// from here.
    pub since: Time,
    /// When the previous password goes, if every data node has the new one by then.
    pub previous_until: Time,
    /// Data nodes that answered and take the new password.
    pub members_with_new: i32,
    /// Data nodes of the topology.
    pub members: i32,
    /// The password Secret and its resourceVersion the rotation goes to
    /// (`<name>/<resourceVersion>`): a Secret changed again, even back to the previous
    /// password, starts the overlap again.
    pub secret_version: String,
    /// Data nodes holding back the previous password's end: not answering, or still on an
    /// older operator's pod template (their readiness probe logs in with the password they
    /// started with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_back_by: Vec<String>,
}
