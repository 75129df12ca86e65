//! Logging in to members and rotating passwords, as both kinds' tests do it: who gets what
//! answer with which password, a password Secret changed, a rotation as status counts it.

use anyhow::Result;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{Progress, Topology, TopologyApis, TopologyStatus};
use crate::testing::valkey_cli_as;

/// What `user` (the default user when `None`) with `password` gets for `args` from the
/// server on `ip:port` (a data node's 6379, a sentinel's 26379).
pub fn answer(ip: &str, port: u16, login: (Option<&str>, &str), args: &[&str]) -> String {
    let port = port.to_string();
    let args: Vec<&str> = ["-p", port.as_str()]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    valkey_cli_as(ip, Some(login), &args)
}

/// Whether valkey-cli's answer shows its login refused: its AUTH failed (on stderr), so the
/// command ran unauthenticated.
pub fn refused(answer: &str) -> bool {
    answer.starts_with("NOAUTH") || answer.contains("WRONGPASS")
}

/// Done once `got` is `want`; else what came instead.
pub fn answers(got: String, want: &str) -> Progress<()> {
    if got == want { Ok(()) } else { Err(got) }
}

/// The value of `field` in an INFO answer.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{field}:")))
        .map(str::to_string)
}

/// Done once `check` holds on each of `members` (its name and IP), or the first that fails.
pub fn on_each<'a>(
    members: impl IntoIterator<Item = (&'a str, &'a str)>,
    check: impl Fn(&str) -> Progress<()>,
) -> Progress<()> {
    members
        .into_iter()
        .try_for_each(|(name, ip)| check(ip).map_err(|e| format!("{name}: {e}")))
}

/// Sets the `password` key of Secret `secret`, as a user rotating it would.
pub async fn set_password(secrets: &Api<Secret>, secret: &str, password: &str) -> Result<()> {
    let patch = json!({"stringData": {"password": password}});
    secrets
        .patch(secret, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Each rotation under way in status as (user, membersWithNew, members).
pub async fn rotations<T: Topology>(
    apis: &TopologyApis<T>,
    name: &str,
) -> Result<Vec<(String, i32, i32)>> {
    let status = apis.status(name).await?;
    Ok(status
        .password_rotations()
        .iter()
        .map(|r| (r.user.as_str().to_string(), r.members_with_new, r.members))
        .collect())
}
