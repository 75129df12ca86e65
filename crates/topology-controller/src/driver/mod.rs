//! The binary's half: what talks to the API server and opens connections, in the same
//! folders as the library: [`shared`], [`cluster`], [`replication`].

pub mod cluster;
pub mod figures;
pub mod replication;
pub mod shared;
