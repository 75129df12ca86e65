//! Installs the operator from deploy/ into the local cluster the way a user would, except
//! that each controller runs as a local process instead of a Deployment: with its own
//! ServiceAccount's token, so RBAC is exercised exactly as deployed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::Scope;
use kube::{Api, ResourceExt};
use serde::Deserialize;

use crate::LocalCluster;
use crate::kubeconfig::{self, Credentials};

const FIELD_MANAGER: &str = "local-cluster";

/// `kustomize build <dir>` (standalone kustomize if on PATH, else `kubectl kustomize`).
pub fn kustomize_build(dir: &Path) -> Result<String> {
    let standalone = Command::new("kustomize").arg("build").arg(dir).output();
    let output = match standalone {
        Ok(output) => output,
        Err(_) => Command::new("kubectl")
            .arg("kustomize")
            .arg(dir)
            .output()
            .context("neither kustomize nor kubectl is on PATH")?,
    };
    if !output.status.success() {
        bail!(
            "kustomize build {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// The documents of a multi-document YAML stream.
pub fn documents(yaml: &str) -> Result<Vec<DynamicObject>> {
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(document)?;
        if value.is_null() {
            continue;
        }
        objects.push(serde_json::from_value(value)?);
    }
    Ok(objects)
}

/// An object's kind, empty when it has none.
pub(crate) fn kind(object: &DynamicObject) -> &str {
    object
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default()
}

/// Server-side applies `objects` (discovering each kind), in order.
pub async fn apply_all(client: &kube::Client, objects: &[DynamicObject]) -> Result<()> {
    for object in objects {
        dynamic_api(client, object)
            .await?
            .patch(
                &object.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
            .with_context(|| format!("applying {} {}", kind(object), object.name_any()))?;
    }
    Ok(())
}

/// The live object that `object` names (discovering its kind).
pub async fn get_live(client: &kube::Client, object: &DynamicObject) -> Result<DynamicObject> {
    dynamic_api(client, object)
        .await?
        .get(&object.name_any())
        .await
        .with_context(|| format!("reading {} {}", kind(object), object.name_any()))
}

/// The API of `object`'s kind, in its namespace (`default` when it names none).
async fn dynamic_api(client: &kube::Client, object: &DynamicObject) -> Result<Api<DynamicObject>> {
    let types = object
        .types
        .as_ref()
        .context("object without apiVersion/kind")?;
    let gvk = kube::api::GroupVersionKind::try_from(types)?;
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {}", types.kind))?;
    Ok(match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object.namespace().as_deref().unwrap_or("default"),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    })
}

/// The binaries deploy/overlays/all runs, sorted.
pub const CONTROLLER_BINARIES: [&str; 4] = [
    "node-controller",
    "pvc-resizer",
    "service-controller",
    "topology-controller",
];

/// The binary a container command runs: its last path component.
pub(crate) fn command_binary(command: &str) -> &str {
    command.rsplit('/').next().unwrap_or(command)
}

/// A controller as its Deployment describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerProcess {
    /// Binary name, from the container's command.
    pub binary: String,
    pub namespace: String,
    pub service_account: String,
    /// Plain `value` env entries of the container.
    pub env: Vec<(String, String)>,
}

/// The controllers an overlay deploys, read from its Deployments.
pub fn controllers(objects: &[DynamicObject]) -> Result<Vec<ControllerProcess>> {
    let mut found = Vec::new();
    for object in objects.iter().filter(|o| kind(o) == "Deployment") {
        let deployment: Deployment = object.clone().try_parse()?;
        let namespace = deployment.namespace().unwrap_or_default();
        let pod = deployment
            .spec
            .and_then(|s| s.template.spec)
            .context("Deployment without a pod spec")?;
        let container = pod
            .containers
            .first()
            .context("Deployment without containers")?;
        let binary = container
            .command
            .as_ref()
            .and_then(|c| c.first())
            .map(|c| command_binary(c))
            .context("controller container without a command")?
            .to_string();
        let env = container
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect();
        found.push(ControllerProcess {
            binary,
            namespace,
            service_account: pod.service_account_name.unwrap_or_else(|| "default".into()),
            env,
        });
    }
    Ok(found)
}

/// A controller started by [`install`].
#[derive(Debug, Clone)]
pub struct RunningController {
    pub process: ControllerProcess,
    /// Its /healthz, /readyz and /metrics server.
    pub http_addr: String,
    /// A kubeconfig with its ServiceAccount's token.
    pub kubeconfig: std::path::PathBuf,
}

/// Installs the CRDs and every RBAC object of `overlay` (not its Deployments and Services),
/// waits for the CRDs, then starts each controller as a local process with a token of its
/// ServiceAccount. Returns the controllers started.
pub async fn install(cluster: &mut LocalCluster, overlay: &Path) -> Result<Vec<RunningController>> {
    install_with_env(cluster, overlay, &[]).await
}

/// [`install`], with `(binary, name, value)` environment entries added to (or replacing)
/// the Deployments' own: a test's shorter intervals, say. `CONTROLLER_LOG`, when set in the
/// caller's environment, becomes every controller's RUST_LOG (to debug a test).
pub async fn install_with_env(
    cluster: &mut LocalCluster,
    overlay: &Path,
    extra_env: &[(&str, &str, &str)],
) -> Result<Vec<RunningController>> {
    let client = cluster.client().await?;
    let objects = documents(&kustomize_build(overlay)?)?;
    let without_workloads: Vec<DynamicObject> = objects
        .iter()
        .filter(|o| !matches!(kind(o), "Deployment" | "Service"))
        .cloned()
        .collect();
    apply_crds_first(cluster, &client, &without_workloads).await?;

    let mut running = Vec::new();
    let log = std::env::var("CONTROLLER_LOG").ok();
    for mut controller in controllers(&objects)? {
        if let Some(log) = &log {
            controller.env.retain(|(n, _)| n != "RUST_LOG");
            controller.env.push(("RUST_LOG".to_string(), log.clone()));
        }
        for (binary, name, value) in extra_env {
            if *binary == controller.binary {
                controller.env.retain(|(n, _)| n != name);
                controller.env.push((name.to_string(), value.to_string()));
            }
        }
        running.push(start_controller(cluster, &client, controller).await?);
    }
    Ok(running)
}

/// Applies the CRDs among `objects`, waits until discovery serves them (controllers read
/// discovery at start), then applies the rest in order.
pub async fn apply_crds_first(
    cluster: &LocalCluster,
    client: &kube::Client,
    objects: &[DynamicObject],
) -> Result<()> {
    let (crds, rest): (Vec<_>, Vec<_>) = objects
        .iter()
        .cloned()
        .partition(|o| kind(o) == "CustomResourceDefinition");
    apply_all(client, &crds).await?;
    let names: Vec<String> = crds.iter().map(|c| c.name_any()).collect();
    cluster
        .wait_for("the CRDs to be established", || {
            let client = client.clone();
            let names = names.clone();
            async move {
                let api: Api<CustomResourceDefinition> = Api::all(client);
                for name in &names {
                    let crd = api.get(name).await?;
                    let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                    if !established {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        })
        .await?;
    // Established is not yet served by discovery; the controllers' preflight reads discovery.
    let served: Vec<(String, String)> = crds
        .iter()
        .filter_map(|c| {
            let spec = &c.data["spec"];
            let group_version = format!(
                "{}/{}",
                spec["group"].as_str()?,
                spec["versions"][0]["name"].as_str()?
            );
            Some((group_version, spec["names"]["plural"].as_str()?.to_owned()))
        })
        .collect();
    cluster
        .wait_for("the CRDs in discovery", || {
            let client = client.clone();
            let served = served.clone();
            async move {
                for (group_version, plural) in &served {
                    let list = client.list_api_group_resources(group_version).await?;
                    if !list.resources.iter().any(|r| &r.name == plural) {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        })
        .await?;
    apply_all(client, &rest).await
}

/// A day-long token for `service_account` (TokenRequest API).
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    service_account: &str,
) -> Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(Duration::from_secs(24 * 3600).as_secs() as i64),
            ..Default::default()
        },
        ..Default::default()
    };
    let response = accounts
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .with_context(|| format!("token for {namespace}/{service_account}"))?;
    response
        .status
        .map(|s| s.token)
        .context("TokenRequest returned no token")
}

/// Writes `<run dir>/<file_stem>.kubeconfig` with a day-long token of `service_account`.
pub async fn service_account_kubeconfig(
    cluster: &LocalCluster,
    client: &kube::Client,
    namespace: &str,
    service_account: &str,
    file_stem: &str,
) -> Result<std::path::PathBuf> {
    let token = service_account_token(client, namespace, service_account).await?;
    let run_dir = &cluster.layout.run_dir;
    let path = run_dir.join(format!("{file_stem}.kubeconfig"));
    std::fs::write(
        &path,
        kubeconfig::render(
            &cluster.layout.api_server_url(),
            &run_dir.join("pki/ca.crt"),
            service_account,
            Credentials::Token(&token),
        ),
    )?;
    Ok(path)
}

async fn start_controller(
    cluster: &mut LocalCluster,
    client: &kube::Client,
    controller: ControllerProcess,
) -> Result<RunningController> {
    let kubeconfig_path = service_account_kubeconfig(
        cluster,
        client,
        &controller.namespace,
        &controller.service_account,
        &controller.binary,
    )
    .await?;
    let binary = crate::workspace_binary(&controller.binary)?;
    let http_port = cluster.controller_port()?;
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (name, value) in &controller.env {
        command.env(name, value);
    }
    command
        .env("KUBECONFIG", &kubeconfig_path)
        .env("LOG_FORMAT", "text")
        .env("HTTP_ADDR", format!("127.0.0.1:{http_port}"))
        .env("POD_NAMESPACE", &controller.namespace)
        .env("POD_NAME", format!("{}-local", controller.binary));
    cluster.spawn_recorded(&controller.binary, &mut command)?;
    let http_addr = format!("127.0.0.1:{http_port}");
    cluster
        .wait_for(&format!("{} /readyz", controller.binary), || {
            let http_addr = http_addr.clone();
            async move { Ok(http_get(&http_addr, "/readyz").await.is_some()) }
        })
        .await?;
    Ok(RunningController {
        process: controller,
        http_addr,
        kubeconfig: kubeconfig_path,
    })
}

/// The body of a plain HTTP/1.0 GET on loopback, if it answered 200.
pub async fn http_get(addr: &str, path: &str) -> Option<String> {
    let (status, body) = http_get_status(addr, path).await?;
    (status == 200).then_some(body)
}

/// An HTTP/1.0 GET's status code and body; `None` when nothing answers over HTTP.
pub async fn http_get_status(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: local\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let response = String::from_utf8(response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVERLAY: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: valkey-operator-node-controller, namespace: valkey-operator-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: valkey-operator-node-controller, namespace: valkey-operator-system}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      serviceAccountName: valkey-operator-node-controller
      containers:
        - name: node-controller
          image: x
          command: [/usr/local/bin/node-controller]
          env:
            - {name: LEADER_ELECT, value: "true"}
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
"#;

    #[test]
    fn controllers_come_from_the_overlay_deployments() {
        let objects = documents(OVERLAY).unwrap();
        assert_eq!(objects.len(), 2);
        let found = controllers(&objects).unwrap();
        assert_eq!(
            found,
            vec![ControllerProcess {
                binary: "node-controller".into(),
                namespace: "valkey-operator-system".into(),
                service_account: "valkey-operator-node-controller".into(),
                env: vec![("LEADER_ELECT".into(), "true".into())],
            }]
        );
    }

    #[test]
    fn the_real_overlay_names_every_controller_binary() {
        let overlay = crate::repo_root().join("deploy/overlays/all");
        let Ok(yaml) = kustomize_build(&overlay) else {
            panic!("kustomize is needed for this test (hack/install-tools.sh installs it)");
        };
        let mut binaries: Vec<String> = controllers(&documents(&yaml).unwrap())
            .unwrap()
            .into_iter()
            .map(|c| c.binary)
            .collect();
        binaries.sort();
        assert_eq!(binaries, CONTROLLER_BINARIES);
    }
}
