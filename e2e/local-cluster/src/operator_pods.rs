//! The operator installed the way a user installs it: an overlay of deploy/ built with
//! kustomize, the image set to the locally built one (what `kustomize edit set image` does),
//! applied server-side. The controllers then run as pods of their Deployments, from the
//! image the node agent pulls, with their probes, security context and projected tokens.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;
use kube::{Api, ResourceExt};

use crate::operator::{apply_crds_first, documents, kustomize_build};
use crate::{LocalCluster, run_script, workspace_binary};

/// The image name the Deployments in deploy/ use.
pub const IMAGE_NAME: &str = "ghcr.io/valkey-operator/valkey-operator";

/// The operator image `hack/operator-image.sh` built.
#[derive(Debug, Clone)]
pub struct OperatorImage {
    /// `name:tag@digest`: pinned by both.
    pub reference: String,
    pub layout: PathBuf,
}

/// Assembles the operator image from the binaries `just image` built and pushes it to
/// `registry`. Never builds: a cargo started from here would inherit a test's environment.
pub fn build_and_push(registry: &str) -> Result<OperatorImage> {
    let oci_image = workspace_binary("oci-image")?;
    let stdout = run_script(
        "hack/operator-image.sh",
        &["--no-build", "--push", registry],
        &[("OCI_IMAGE", &oci_image)],
    )?;
    let (reference, layout) = stdout
        .trim()
        .split_once(' ')
        .with_context(|| format!("unexpected output of hack/operator-image.sh: {stdout:?}"))?;
    Ok(OperatorImage {
        reference: reference.into(),
        layout: layout.into(),
    })
}

/// Points every container that runs [`IMAGE_NAME`] (any tag or digest) at `image`.
pub fn set_image(objects: &mut [DynamicObject], image: &str) {
    for object in objects.iter_mut() {
        // get_mut, not indexing: indexing a missing key would add it to the object.
        let Some(spec) = object
            .data
            .get_mut("spec")
            .and_then(|s| s.get_mut("template"))
            .and_then(|t| t.get_mut("spec"))
        else {
            continue;
        };
        for list in ["initContainers", "containers"] {
            let Some(containers) = spec.get_mut(list).and_then(|c| c.as_array_mut()) else {
                continue;
            };
            for container in containers {
                let current = container["image"].as_str().unwrap_or_default();
                if image_name(current) == IMAGE_NAME {
                    container["image"] = image.into();
                }
            }
        }
    }
}

/// An image reference without its tag and digest.
fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

/// Installs `overlay` with the controllers running as pods of `image`, and waits until
/// every Deployment has rolled out. Returns the Deployments as `(namespace, name)`.
pub async fn install(
    cluster: &LocalCluster,
    overlay: &Path,
    image: &str,
) -> Result<Vec<(String, String)>> {
    let client = cluster.client().await?;
    let mut objects = documents(&kustomize_build(overlay)?)?;
    set_image(&mut objects, image);
    apply_crds_first(cluster, &client, &objects).await?;
    let deployments: Vec<(String, String)> = objects
        .iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
        .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
        .collect();
    for (namespace, name) in &deployments {
        wait_rolled_out(cluster, namespace, name).await?;
    }
    Ok(deployments)
}

/// Waits until the Deployment's pods all run the current template and are available.
pub async fn wait_rolled_out(cluster: &LocalCluster, namespace: &str, name: &str) -> Result<()> {
    let client = cluster.client().await?;
    let api: Api<Deployment> = Api::namespaced(client, namespace);
    cluster
        .wait_for(
            &format!("Deployment {namespace}/{name} to roll out"),
            || {
                let api = api.clone();
                async move { Ok(rolled_out(&api.get(name).await?)) }
            },
        )
        .await
}

/// `kubectl rollout status`'s test: the controller saw this generation, and every replica
/// is updated and available.
pub fn rolled_out(deployment: &Deployment) -> bool {
    let want = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = deployment.status.as_ref() else {
        return false;
    };
    status.observed_generation >= deployment.metadata.generation
        && status.updated_replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVERLAY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: a, namespace: ops}
spec:
  template:
    spec:
      initContainers:
        - {name: init, image: "ghcr.io/valkey-operator/valkey-operator:latest"}
      containers:
        - {name: c, image: "ghcr.io/valkey-operator/valkey-operator:latest"}
        - {name: sidecar, image: "ghcr.io/valkey-operator/valkey-operator-extra:1"}
---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ops}
spec: {ports: [{port: 80}]}
"#;

    #[test]
    fn set_image_replaces_only_the_operator_image() {
        let mut objects = documents(OVERLAY).unwrap();
        let pinned = "ghcr.io/valkey-operator/valkey-operator:0.1.0-abc@sha256:00ff";
        set_image(&mut objects, pinned);
        let spec = &objects[0].data["spec"]["template"]["spec"];
        assert_eq!(spec["initContainers"][0]["image"], pinned);
        assert_eq!(spec["containers"][0]["image"], pinned);
        assert_eq!(
            spec["containers"][1]["image"],
            "ghcr.io/valkey-operator/valkey-operator-extra:1"
        );
        assert!(objects[1].data["spec"].get("template").is_none());
    }

    #[test]
    fn image_names() {
        assert_eq!(image_name("a/b:1"), "a/b");
        assert_eq!(image_name("a/b:1@sha256:00"), "a/b");
        assert_eq!(image_name("127.0.0.1:5000/a/b"), "127.0.0.1:5000/a/b");
        assert_eq!(image_name("127.0.0.1:5000/a/b:2"), "127.0.0.1:5000/a/b");
    }

    #[test]
    fn rollout_needs_every_replica_updated_and_available() {
        let mut d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "generation": 2},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}
        }))
        .unwrap();
        assert!(!rolled_out(&d));
        d.status.as_mut().unwrap().available_replicas = Some(2);
        assert!(rolled_out(&d));
        d.status.as_mut().unwrap().observed_generation = Some(1);
        assert!(!rolled_out(&d));
    }
}
