//! Test infrastructure: build OCI images from a directory, push them to a registry, and pull and
//! unpack them on a node, all without Docker.

pub mod build;
pub mod client;
pub mod digest;
pub mod manifest;
pub mod reference;
pub mod store;
pub mod unpack;

pub use build::{Built, ImageConfig, build_layout, read_layout};
pub use client::{RegistryClient, RegistryError};
pub use digest::{Digest, HashingWriter};
pub use manifest::{Descriptor, Index, Manifest, Platform};
pub use reference::Reference;
pub use store::{ImageStore, PullError, PullPolicy, PulledImage};
