//! What every topology kind shares: the Valkey seams, passwords, users, TLS and the CA,
//! NetworkPolicy and disruption budgets, member status, and the parsers that know no slots.

pub mod acl;
pub mod auth;
pub mod ca_replacement;
pub mod cert_expiry;
pub mod commands;
pub mod conditions;
pub mod connections;
pub mod default_password;
pub mod disruption;
pub mod events;
pub mod execute;
#[cfg(test)]
pub mod fake;
pub mod figures;
pub mod guard;
pub mod info;
pub mod issuer;
pub mod live;
pub mod member_facts;
pub mod member_status;
pub mod members;
pub mod network;
pub mod operator_password;
pub mod owned;
pub mod pod_monitor;
pub mod roll;
pub mod storage;
pub mod target;
pub mod tls;
pub mod users;
pub mod vitals;
