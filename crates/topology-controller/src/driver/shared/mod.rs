//! The Kubernetes half every topology kind shares: fetching members, Secrets, certificates,
//! the password rotations, the pulse and the password look, the fred connection.

pub mod acl_users;
pub mod credentials;
pub mod error;
pub mod member_certs;
pub mod member_nodes;
pub mod member_tls;
pub mod objects;
pub mod operator_rotation;
pub mod password_look;
pub mod password_rotation;
pub mod pipeline;
pub mod pod_monitors;
pub mod pulse;
pub mod secret_store;
pub mod secrets;
pub mod stages;
pub mod topology;
pub mod valkey;
