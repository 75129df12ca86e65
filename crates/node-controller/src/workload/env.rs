//! Container environment: the pod's own facts from the downward API, and passwords from the
//! Secrets `spec.auth` names. Only references go into the pod spec; the kubelet reads the
//! Secrets, node-controller never does.

use crd_types::ValkeyNode;
use crd_types::template::{Exporter, MONITORING_USER, SecretKeyRef};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, SecretKeySelector};

use super::layout::main_port;
use crate::config::{
    EXPORTER_PASSWORD_FILE, OPERATOR_PASSWORD_ENV, PASSWORD_ENV, POD_IP_ENV,
    exporter_logs_in_as_monitoring, tls,
};

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

fn value_env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The exporter's environment: where Valkey is, where to listen, how to log in, and
/// redis_exporter's `/scrape?target=` endpoint off (it would send those credentials to any
/// address its caller names; the flag exists since v1.83.0, older images ignore it). With
/// passwords: the read-only `monitoring` user, its password from the file the
/// `exporter-auth` init container writes, and no `CONFIG GET` (the user may not; it would
/// show `masterauth`). Without, there is nothing to log in with. With `spec.tls`, TLS with
/// the node's own certificate (see [`crate::config::tls`]).
pub(super) fn exporter_env(node: &ValkeyNode, exporter: &Exporter) -> Vec<EnvVar> {
    let (port, _) = main_port(node.spec.mode);
    let mut env = vec![field_env(POD_IP_ENV, "status.podIP")];
    if exporter_logs_in_as_monitoring(&node.spec) {
        env.push(value_env("REDIS_USER", MONITORING_USER));
        env.push(value_env("REDIS_PASSWORD_FILE", EXPORTER_PASSWORD_FILE));
        env.push(value_env("REDIS_EXPORTER_CONFIG_COMMAND", "-"));
    }
    // The password file's key is this address with the user: keep them in step.
    let tls = node.spec.tls.as_ref();
    env.push(value_env(
        "REDIS_ADDR",
        format!("{}://$({POD_IP_ENV}):{port}", tls::exporter_scheme(tls)),
    ));
    if tls::exporter_presents_certificate(tls) {
        env.push(value_env("REDIS_EXPORTER_TLS_CA_CERT_FILE", tls::ca_file()));
        // A client certificate, as the node asks clients for one.
        env.push(value_env(
            "REDIS_EXPORTER_TLS_CLIENT_CERT_FILE",
            tls::cert_file(),
        ));
        env.push(value_env(
            "REDIS_EXPORTER_TLS_CLIENT_KEY_FILE",
            tls::key_file(),
        ));
    }
    if tls.is_some() {
        // redis_exporter (Go) checks the server's names strictly, an IP address against an
        // IP SAN, and it dials its own pod's IP, which a certificate issued into the Secret
        // before the pod existed cannot name. Valkey itself checks only the chain. The
        // connection never leaves the pod's network namespace, so nothing on the way can
        // be impersonated; the client certificate is still presented.
        env.push(value_env("REDIS_EXPORTER_SKIP_TLS_VERIFICATION", "true"));
    }
    env.push(value_env("REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT", "true"));
    // The exporter's own listen address, so `exporter.port` is where it really serves.
    env.push(value_env(
        "REDIS_EXPORTER_WEB_LISTEN_ADDRESS",
        format!(":{}", exporter.port),
    ));
    env
}

#[cfg(test)]
mod tests {
    use crd_types::node::Mode;
    use crd_types::template::{Auth, Exporter};

    use k8s_openapi::api::core::v1::Container;

    use crate::workload::fixtures::{build, container, node, pod, secret, secret_env_of};

    #[test]
    fn passwords_reach_the_containers_from_secrets() {
        let d = build(&node(Mode::Cluster, |s| {
            s.auth = Some(Auth {
                password_secret_ref: Some(secret("app")),
                operator_secret_ref: Some(secret("op")),
                ..Default::default()
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
        assert!(command.contains(">$REDISCLI_AUTH\""), "{command}");
        assert!(command.contains("/tmp/valkey-auth.conf"), "{command}");
        assert!(!v.args.as_ref().unwrap().iter().any(|a| a.contains("AUTH")));
        // The exporter holds no Secret: it logs in as the monitoring user with the password
        // the exporter-auth init container derives into a file (read-only to the others).
        let e = container(&d, "exporter");
        assert_eq!(secret_env_of(e), []);
        let init = &pod(&d).init_containers.as_ref().unwrap()[0];
        assert_eq!(init.name, "exporter-auth");
        assert_eq!(secret_env_of(init), secret_env_of(v));
        let mount = |c: &Container| {
            c.volume_mounts
                .iter()
                .flatten()
                .find(|m| m.name == "exporter-auth")
                .map(|m| (m.mount_path.clone(), m.read_only))
        };
        assert_eq!(mount(init), Some(("/run/valkey-exporter".into(), None)));
        assert_eq!(mount(e), Some(("/run/valkey-exporter".into(), Some(true))));
        // The server reads the monitoring password back from it when it restarts.
        assert_eq!(mount(v), Some(("/run/valkey-exporter".into(), Some(true))));
        assert_eq!(
            values_of(e),
            [
                ("REDIS_USER", "monitoring"),
                ("REDIS_PASSWORD_FILE", "/run/valkey-exporter/passwords.json"),
                ("REDIS_EXPORTER_CONFIG_COMMAND", "-"),
                ("REDIS_ADDR", "redis://$(POD_IP):6379"),
                ("REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT", "true"),
                ("REDIS_EXPORTER_WEB_LISTEN_ADDRESS", ":9121"),
            ]
        );
        // The probe logs in as the probe user, with no password on its command line.
        let probe = v.readiness_probe.as_ref().unwrap().exec.as_ref().unwrap();
        let probe = probe.command.as_ref().unwrap().join(" ");
        assert!(
            probe.contains("--user probe") && !probe.contains("-a "),
            "{probe}"
        );

        // A sentinel's exporter logs in as its monitoring user too, after sentinel-config.
        let d = build(&node(Mode::Sentinel, |s| {
            s.auth = Some(Auth {
                password_secret_ref: Some(secret("app")),
                operator_secret_ref: Some(secret("op")),
                ..Default::default()
            });
            s.template.exporter = Some(Exporter {
                image: "e".into(),
                port: 9121,
                resources: None,
            });
        }));
        let e = container(&d, "exporter");
        assert_eq!(secret_env_of(e), []);
        assert_eq!(mount(e), Some(("/run/valkey-exporter".into(), Some(true))));
        assert!(values_of(e).contains(&("REDIS_ADDR", "redis://$(POD_IP):26379")));
        let inits: Vec<_> = pod(&d)
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(inits, ["sentinel-config", "exporter-auth"]);
        let command = container(&d, "valkey").command.as_ref().unwrap().join(" ");
        assert!(command.contains("printf 'user monitoring on "), "{command}");
    }

    #[test]
    fn with_tls_the_exporter_dials_rediss_with_the_certificate_only_if_asked() {
        use crd_types::template::{Tls, TlsAuthClients};
        let tls = |s: &mut crd_types::ValkeyNodeSpec| {
            s.tls = Some(Tls {
                secret_name: "orders-tls".into(),
                auth_clients: TlsAuthClients::Optional,
                plain_text_clients: false,
            });
            s.template.exporter = Some(Exporter {
                image: "e".into(),
                port: 9121,
                resources: None,
            });
        };
        for (mode, port) in [(Mode::Cluster, 6379), (Mode::Sentinel, 26379)] {
            let d = build(&node(mode, tls));
            let e = container(&d, "exporter");
            let addr = format!("rediss://$(POD_IP):{port}");
            assert_eq!(
                values_of(e),
                [
                    ("REDIS_ADDR", addr.as_str()),
                    ("REDIS_EXPORTER_TLS_CA_CERT_FILE", "/etc/valkey-tls/ca.crt"),
                    (
                        "REDIS_EXPORTER_TLS_CLIENT_CERT_FILE",
                        "/etc/valkey-tls/tls.crt"
                    ),
                    (
                        "REDIS_EXPORTER_TLS_CLIENT_KEY_FILE",
                        "/etc/valkey-tls/tls.key"
                    ),
                    ("REDIS_EXPORTER_SKIP_TLS_VERIFICATION", "true"),
                    ("REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT", "true"),
                    ("REDIS_EXPORTER_WEB_LISTEN_ADDRESS", ":9121"),
                ]
            );
            let mounts: Vec<_> = e
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
                .collect();
            assert_eq!(mounts, [("tls", "/etc/valkey-tls", Some(true))]);
        }
        // Not asked for a certificate: neither it nor its key reaches the exporter.
        let d = build(&node(Mode::Cluster, |s| {
            tls(s);
            s.tls.as_mut().unwrap().auth_clients = TlsAuthClients::Never;
        }));
        let e = container(&d, "exporter");
        assert_eq!(
            values_of(e),
            [
                ("REDIS_ADDR", "rediss://$(POD_IP):6379"),
                ("REDIS_EXPORTER_SKIP_TLS_VERIFICATION", "true"),
                ("REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT", "true"),
                ("REDIS_EXPORTER_WEB_LISTEN_ADDRESS", ":9121"),
            ]
        );
        assert_eq!(e.volume_mounts, None);
        // With passwords, the password file's keys follow the scheme (see config::auth).
        let d = build(&node(Mode::Cluster, |s| {
            tls(s);
            s.auth = Some(Auth {
                password_secret_ref: Some(secret("app")),
                operator_secret_ref: None,
                ..Default::default()
            });
        }));
        let e = container(&d, "exporter");
        assert!(values_of(e).contains(&("REDIS_ADDR", "rediss://$(POD_IP):6379")));
        let init = &pod(&d).init_containers.as_ref().unwrap()[0];
        assert!(init.command.as_ref().unwrap()[2].contains("\"rediss://monitoring@%s:6379\""));
        let mounts: Vec<_> = e
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(mounts, ["exporter-auth", "tls"]);
    }

    /// The exporter's plain (non-Secret, non-field) variables, in order.
    fn values_of(c: &Container) -> Vec<(&str, &str)> {
        c.env
            .iter()
            .flatten()
            .filter_map(|v| Some((v.name.as_str(), v.value.as_deref()?)))
            .collect()
    }
}
