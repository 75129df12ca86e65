//! The build stage of a reconcile: from what is live ([`Live`]) to what to do with the node's
//! Service ([`Build`]), with no I/O.

use crd_types::ValkeyNode;
use k8s_openapi::api::core::v1::Service;

use crate::error::Error;
use crate::service;

/// What the fetch stage read.
#[derive(Debug, Clone)]
pub struct Live {
    /// The node, read again rather than taken from the watch cache: the cache may not show the
    /// status this controller applied a moment ago, and the recorded ClusterIP is what a new
    /// one is compared with.
    pub node: ValkeyNode,
    /// The Service of the node's name, whoever made it.
    pub service: Option<Service>,
}

/// What to do with the node's Service.
#[derive(Debug, Clone, PartialEq)]
pub enum Build {
    /// A Service of the node's name exists that the node does not control: left alone.
    NotOwned { found: Service },
    /// Apply the node's own Service: there is none yet.
    Create { service: Service },
    /// Apply the node's own Service over the live one, which departs from it (an edit).
    Update { service: Service },
    /// The live Service already holds the desired one: an idle resync costs a read.
    Current { live: Service },
}

pub fn build(live: &Live) -> Result<Build, Error> {
    match &live.service {
        Some(found) if !service::controlled_by(found, &live.node) => Ok(Build::NotOwned {
            found: found.clone(),
        }),
        found => {
            let desired = service::desired(&live.node)?;
            Ok(match found {
                None => Build::Create { service: desired },
                Some(live) if operator_runtime::is_applied(&desired, live) => {
                    Build::Current { live: live.clone() }
                }
                Some(_) => Build::Update { service: desired },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::tests::node;
    use crd_types::node::Mode;

    #[test]
    fn a_missing_or_changed_service_is_applied_a_current_one_is_not() {
        let n = node(Mode::Cluster);
        let missing = Live {
            node: n.clone(),
            service: None,
        };
        let Ok(Build::Create { service }) = build(&missing) else {
            panic!("{:?}", build(&missing))
        };
        // As the API server returns it: with a ClusterIP and a uid.
        let mut stored = service.clone();
        stored.metadata.uid = Some("svc-uid".into());
        stored.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.12".into());
        let current = Live {
            node: n.clone(),
            service: Some(stored.clone()),
        };
        assert_eq!(
            build(&current).unwrap(),
            Build::Current {
                live: stored.clone()
            }
        );

        let mut edited = stored;
        edited.spec.as_mut().unwrap().publish_not_ready_addresses = Some(false);
        let edited = Live {
            node: n,
            service: Some(edited),
        };
        assert!(matches!(build(&edited), Ok(Build::Update { .. })));
    }

    #[test]
    fn someone_elses_service_is_left_alone() {
        let n = node(Mode::Standalone);
        let mut theirs = service::desired(&n).unwrap();
        theirs.metadata.owner_references = None;
        let live = Live {
            node: n,
            service: Some(theirs.clone()),
        };
        assert_eq!(build(&live).unwrap(), Build::NotOwned { found: theirs });
    }
}
