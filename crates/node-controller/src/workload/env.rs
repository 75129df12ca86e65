//! Container environment: the pod's own facts from the downward API, and passwords from the
//! Secrets `spec.auth` names. Only references go into the pod spec; the kubelet reads the
//! Secrets, node-controller never does.

use crd_types::ValkeyNode;
use crd_types::template::{Exporter, OPERATOR_USER, SecretKeyRef};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, SecretKeySelector};

use super::containers::main_port;
use crate::config::{OPERATOR_PASSWORD_ENV, PASSWORD_ENV, POD_IP_ENV};

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: path.into(),
            }),
            ..Default::default()
        }),
    }
}

fn secret_env(name: &str, secret: &SecretKeyRef) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.name.clone(),
                key: secret.key.clone(),
                optional: None,
            }),
            ..Default::default()
        }),
    }
}

/// POD_IP, POD_NAME and POD_NAMESPACE from the downward API, then the passwords the
/// rendered args reference. A missing Secret keeps the container from starting (the pod
/// waits with CreateContainerConfigError, which the node's status reports); an empty one is
/// refused by the valkey container's start command (see [`super::containers`]).
pub(super) fn valkey_env(node: &ValkeyNode) -> Vec<EnvVar> {
    let mut env = vec![
        field_env(POD_IP_ENV, "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
    ];
    if let Some(auth) = &node.spec.auth {
        if let Some(secret) = &auth.password_secret_ref {
            env.push(secret_env(PASSWORD_ENV, secret));
        }
        if let Some(secret) = &auth.operator_secret_ref {
            env.push(secret_env(OPERATOR_PASSWORD_ENV, secret));
        }
    }
    env
}

/// The exporter's environment: where Valkey is, where to listen, and how to log in (the
/// default user when it has a password, else the operator user: either reads INFO).
pub(super) fn exporter_env(node: &ValkeyNode, exporter: &Exporter) -> Vec<EnvVar> {
    let (port, _) = main_port(node.spec.mode);
    let mut env = vec![field_env(POD_IP_ENV, "status.podIP")];
    match node
        .spec
        .auth
        .as_ref()
        .map(|a| (&a.password_secret_ref, &a.operator_secret_ref))
    {
        Some((Some(password), _)) => env.push(secret_env("REDIS_PASSWORD", password)),
        Some((None, Some(operator))) => {
            env.push(EnvVar {
                name: "REDIS_USER".into(),
                value: Some(OPERATOR_USER.into()),
                value_from: None,
            });
            env.push(secret_env("REDIS_PASSWORD", operator));
        }
        _ => {}
    }
    env.push(EnvVar {
        name: "REDIS_ADDR".into(),
        value: Some(format!("redis://$({POD_IP_ENV}):{port}")),
        value_from: None,
    });
    // The exporter's own listen address, so `exporter.port` is where it really serves.
    env.push(EnvVar {
        name: "REDIS_EXPORTER_WEB_LISTEN_ADDRESS".into(),
        value: Some(format!(":{}", exporter.port)),
        value_from: None,
    });
    env
}

#[cfg(test)]
mod tests {
    use crd_types::node::Mode;
    use crd_types::template::{Auth, Exporter};

    use crate::workload::fixtures::{build, container, node, secret, secret_env_of};
    use crate::workload::probes::readiness_command;

    #[test]
    fn passwords_reach_the_containers_from_secrets() {
        let d = build(&node(Mode::Cluster, |s| {
            s.auth = Some(Auth {
                password_secret_ref: Some(secret("app")),
                operator_secret_ref: Some(secret("op")),
            });
            s.template.exporter = Some(Exporter {
                image: "e".into(),
                port: 9121,
                resources: None,
            });
        }));
        let v = container(&d, "valkey");
        assert_eq!(
            secret_env_of(v),
            [
                ("REDISCLI_AUTH".to_string(), "app/password".to_string()),
                ("VALKEY_OPERATOR_PASSWORD".into(), "op/password".into()),
            ]
        );
        // The start-up shell writes them to the included auth file; no argument holds one.
        let command = v.command.as_ref().unwrap().join(" ");
        assert!(command.contains("\"$REDISCLI_AUTH\""), "{command}");
        assert!(command.contains("/tmp/valkey-auth.conf"), "{command}");
        assert!(!v.args.as_ref().unwrap().iter().any(|a| a.contains("AUTH")));
        assert_eq!(
            secret_env_of(container(&d, "exporter")),
            [("REDIS_PASSWORD".to_string(), "app/password".to_string())]
        );
        // The probe's valkey-cli reads REDISCLI_AUTH itself.
        assert!(!readiness_command(Mode::Cluster).join(" ").contains("-a "));

        let d = build(&node(Mode::Cluster, |s| {
            s.auth = Some(Auth {
                password_secret_ref: None,
                operator_secret_ref: Some(secret("op")),
            });
            s.template.exporter = Some(Exporter {
                image: "e".into(),
                port: 9121,
                resources: None,
            });
        }));
        let e = container(&d, "exporter");
        assert_eq!(
            secret_env_of(e),
            [("REDIS_PASSWORD".to_string(), "op/password".to_string())]
        );
        assert!(
            e.env
                .iter()
                .flatten()
                .any(|v| v.name == "REDIS_USER" && v.value.as_deref() == Some("operator"))
        );
    }
}
