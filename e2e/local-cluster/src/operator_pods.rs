//! The operator installed the way a user installs it: an overlay of deploy/ built with
//! kustomize, the image set to the locally built one (what `kustomize edit set image` does),
//! applied server-side. The controllers then run as pods of their Deployments, from the
//! image the node agent pulls, with their probes, security context and projected tokens.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;
use kube::{Api, ResourceExt};

use crate::controller_pods::PodController;
use crate::operator::{
    apply_crds_first, command_binary, documents, kind, kustomize_build, service_account_kubeconfig,
};
use crate::{LocalCluster, run_script, workspace_binary};

/// The image name the Deployments in deploy/ use.
pub const IMAGE_NAME: &str = "ghcr.io/valkey-operator/valkey-operator";
/// Its repository in the local registry (the name without its registry host).
const REPOSITORY: &str = "valkey-operator/valkey-operator";

/// The operator image `hack/operator-image.sh` built.
#[derive(Debug, Clone)]
pub struct OperatorImage {
    /// `name:tag@digest`: pinned by both.
    pub reference: String,
    pub layout: PathBuf,
}

/// Assembles the operator image from the binaries `just image` built
/// (`hack/operator-image.sh --no-build`). Never builds: a cargo started from here would
/// inherit a test's environment.
fn assemble() -> Result<OperatorImage> {
    let oci_image = workspace_binary("oci-image")?;
    let stdout = run_script(
        "hack/operator-image.sh",
        &["--no-build"],
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

impl OperatorImage {
    /// The tag of [`OperatorImage::reference`].
    pub fn tag(&self) -> Result<&str> {
        let no_digest = self.reference.split('@').next().unwrap_or_default();
        no_digest
            .strip_prefix(IMAGE_NAME)
            .and_then(|t| t.strip_prefix(':'))
            .with_context(|| format!("image reference without a tag: {}", self.reference))
    }
}

/// The operator image, pushed to `cluster`'s registry. Assembled once per process: the
/// layout depends only on the binaries `just image` built.
pub async fn push_image(cluster: &LocalCluster) -> Result<OperatorImage> {
    static ASSEMBLED: Mutex<Option<OperatorImage>> = Mutex::new(None);
    let image = {
        let mut assembled = ASSEMBLED.lock().unwrap();
        if assembled.is_none() {
            *assembled = Some(assemble()?);
        }
        assembled.clone().unwrap()
    };
    push(cluster, &image).await?;
    Ok(image)
}

/// Pushes `image` (its layout, under its tag) to `cluster`'s registry and checks the digest.
pub async fn push(cluster: &LocalCluster, image: &OperatorImage) -> Result<()> {
    let registry = cluster
        .registry_url
        .as_deref()
        .context("the cluster has no registry: it runs without the node agent")?;
    let pushed = oci_image::RegistryClient::new(registry)
        .push_layout(&image.layout, REPOSITORY, image.tag()?)
        .await
        .with_context(|| format!("pushing {} to {registry}", image.reference))?;
    if !image.reference.ends_with(&format!("@{pushed}")) {
        bail!(
            "pushed {pushed} from {}, not {}",
            image.layout.display(),
            image.reference
        );
    }
    Ok(())
}

/// Installs `overlay` with its controllers as pods of the operator image (pushed to the
/// cluster's registry), each container's environment amended by `extra_env` entries
/// `(binary, name, value)`; `CONTROLLER_LOG`, when set, becomes every controller's
/// RUST_LOG. Waits until each Deployment has rolled out and one of its pods leads. From
/// then on a restarted controller container fails the cluster's waits.
pub async fn install_controllers(
    cluster: &mut LocalCluster,
    overlay: &Path,
    extra_env: &[(&str, &str, &str)],
) -> Result<Vec<PodController>> {
    let image = push_image(cluster).await?;
    let log = std::env::var("CONTROLLER_LOG").ok();
    let mut env = extra_env.to_vec();
    if let Some(log) = &log {
        env.push(("*", "RUST_LOG", log));
    }
    let objects = apply_overlay(cluster, overlay, &image.reference, &env).await?;
    let client = cluster.client().await?;
    let mut controllers = Vec::new();
    for object in objects.iter().filter(|o| kind(o) == "Deployment") {
        let deployment: Deployment = object.clone().try_parse()?;
        let namespace = deployment.namespace().unwrap_or_default();
        let account = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let kubeconfig =
            service_account_kubeconfig(cluster, &client, &namespace, &account, &account).await?;
        controllers.push(PodController::from_deployment(&deployment, kubeconfig)?);
    }
    for controller in &controllers {
        wait_rolled_out(cluster, &controller.namespace, &controller.deployment).await?;
        controller.wait_led(cluster).await?;
    }
    let namespaces: std::collections::BTreeSet<&str> =
        controllers.iter().map(|c| c.namespace.as_str()).collect();
    for namespace in namespaces {
        cluster.fail_on_restarts(namespace, "app.kubernetes.io/name=valkey-operator");
    }
    Ok(controllers)
}

/// Sets `(binary, name, value)` in the environment of every Deployment container whose
/// command runs `binary` (`*`: every one), replacing an entry of that name.
pub fn set_env(objects: &mut [DynamicObject], env: &[(&str, &str, &str)]) -> Result<()> {
    for object in objects.iter_mut().filter(|o| kind(o) == "Deployment") {
        let Some(containers) = object.data["spec"]["template"]["spec"]
            .get_mut("containers")
            .and_then(|c| c.as_array_mut())
        else {
            continue;
        };
        for container in containers {
            let binary = container["command"][0]
                .as_str()
                .map(command_binary)
                .unwrap_or_default()
                .to_string();
            for &(for_binary, name, value) in env {
                if for_binary != "*" && for_binary != binary {
                    continue;
                }
                let list = container
                    .as_object_mut()
                    .context("a container that is not an object")?
                    .entry("env")
                    .or_insert_with(|| serde_json::json!([]));
                let entries = list.as_array_mut().context("env is not a list")?;
                entries.retain(|e| e["name"] != name);
                entries.push(serde_json::json!({"name": name, "value": value}));
            }
        }
    }
    Ok(())
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
    install_with_env(cluster, overlay, image, &[]).await
}

/// As [`install`], with `env` set in the controllers' containers (see [`set_env`]).
pub async fn install_with_env(
    cluster: &LocalCluster,
    overlay: &Path,
    image: &str,
    env: &[(&str, &str, &str)],
) -> Result<Vec<(String, String)>> {
    let objects = apply_overlay(cluster, overlay, image, env).await?;
    let deployments: Vec<(String, String)> = objects
        .iter()
        .filter(|o| kind(o) == "Deployment")
        .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
        .collect();
    for (namespace, name) in &deployments {
        wait_rolled_out(cluster, namespace, name).await?;
    }
    Ok(deployments)
}

/// Server-side applies `overlay` (CRDs first) with the operator image set to `image` and
/// `env` set in the controllers' containers (see [`set_env`]); returns its objects.
async fn apply_overlay(
    cluster: &LocalCluster,
    overlay: &Path,
    image: &str,
    env: &[(&str, &str, &str)],
) -> Result<Vec<DynamicObject>> {
    let client = cluster.client().await?;
    let mut objects = documents(&kustomize_build(overlay)?)?;
    set_image(&mut objects, image);
    set_env(&mut objects, env)?;
    apply_crds_first(cluster, &client, &objects).await?;
    Ok(objects)
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
    fn set_env_reaches_the_named_controller_or_every_one() {
        let mut objects = documents(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: a}
spec:
  template:
    spec:
      containers:
        - {name: a, command: [/usr/local/bin/pvc-resizer], env: [{name: RUST_LOG, value: info}, {name: K, value: "1"}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: b}
spec:
  template:
    spec:
      containers:
        - {name: b, command: [/usr/local/bin/node-controller]}
"#,
        )
        .unwrap();
        set_env(
            &mut objects,
            &[
                ("pvc-resizer", "STATS_INTERVAL", "2"),
                ("*", "RUST_LOG", "debug"),
            ],
        )
        .unwrap();
        let env_of =
            |i: usize| objects[i].data["spec"]["template"]["spec"]["containers"][0]["env"].clone();
        assert_eq!(
            env_of(0),
            serde_json::json!([
                {"name": "K", "value": "1"},
                {"name": "STATS_INTERVAL", "value": "2"},
                {"name": "RUST_LOG", "value": "debug"}
            ])
        );
        assert_eq!(
            env_of(1),
            serde_json::json!([{"name": "RUST_LOG", "value": "debug"}])
        );
    }

    #[test]
    fn the_tag_of_a_pinned_reference() {
        let image = |reference: &str| OperatorImage {
            reference: reference.into(),
            layout: PathBuf::new(),
        };
        let pinned = image("ghcr.io/valkey-operator/valkey-operator:0.1.0-abc-dirty@sha256:00ff");
        assert_eq!(pinned.tag().unwrap(), "0.1.0-abc-dirty");
        assert!(
            image("ghcr.io/valkey-operator/valkey-operator@sha256:00")
                .tag()
                .is_err()
        );
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
