//! One reconcile of a ValkeyCluster and its connections.

pub mod connect;
pub mod moved;
pub mod reconcile;
