use super::*;
use std::collections::BTreeMap;

use crd_types::template::{Persistence, Scheduling};
use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::workload::DesiredWorkload;
use crate::workload::fixtures::{build, container, node, pod};

#[test]
fn servers_have_no_init_container() {
    for mode in [Mode::Standalone, Mode::Cluster] {
        assert_eq!(pod(&build(&node(mode, |_| {}))).init_containers, None);
    }
}

#[test]
fn data_volume_is_the_claim_or_an_empty_dir() {
    let d = build(&node(Mode::Standalone, |_| {}));
    let data = |d: &DesiredWorkload| {
        pod(d)
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "data")
            .cloned()
            .unwrap()
    };
    assert!(data(&d).empty_dir.is_some());
    let d = build(&node(Mode::Standalone, |s| {
        s.template.persistence = Some(Persistence {
            size: "1Gi".into(),
            ..Default::default()
        })
    }));
    assert_eq!(
        data(&d).persistent_volume_claim.unwrap().claim_name,
        "cache-data"
    );
}

#[test]
fn the_users_secret_is_mounted_only_on_data_nodes_naming_one() {
    let users = |d: &DesiredWorkload| {
        let volume = pod(d)
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == USERS_VOLUME)
            .cloned();
        let mount = container(d, "valkey")
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == USERS_VOLUME)
            .cloned();
        assert_eq!(volume.is_some(), mount.is_some());
        volume.zip(mount)
    };
    for mode in [Mode::Standalone, Mode::Cluster] {
        assert_eq!(users(&build(&node(mode, |_| {}))), None);
        let d = build(&node(mode, |s| {
            s.users_secret_name = Some("orders-users".into())
        }));
        let (volume, mount) = users(&d).unwrap();
        let secret = volume.secret.unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("orders-users"));
        assert_eq!(secret.optional, Some(true));
        assert_eq!(
            secret.items.unwrap(),
            [KeyToPath {
                key: "users.acl".into(),
                path: "users.acl".into(),
                mode: None,
            }]
        );
        assert_eq!(secret.default_mode, Some(0o440));
        // The group that reads it is the server's.
        assert_eq!(
            pod(&d).security_context.as_ref().unwrap().fs_group,
            Some(999)
        );
        assert_eq!(mount.mount_path, "/etc/valkey-users");
        assert_eq!(mount.read_only, Some(true));
        // The whole directory: a subPath mount never sees the Secret change.
        assert_eq!(mount.sub_path, None);
    }
    let sentinel = build(&node(Mode::Sentinel, |s| {
        s.users_secret_name = Some("orders-users".into())
    }));
    assert_eq!(users(&sentinel), None);
    assert_eq!(
        sentinel,
        build(&node(Mode::Sentinel, |_| {})),
        "a sentinel ignores the field"
    );
}

#[test]
fn the_operator_password_is_mounted_and_announced_only_with_an_operator_secret() {
    use crate::workload::fixtures::template_annotations;
    let annotation = names::annotations::OPERATOR_PASSWORD_FILE;
    let operator = || crd_types::template::Auth {
        password_secret_ref: Some(crate::workload::fixtures::secret("app")),
        operator_secret_ref: Some(SecretKeyRef {
            name: "orders-operator".into(),
            key: "pw".into(),
        }),
        ..Default::default()
    };
    for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
        let d = build(&node(mode, |s| {
            s.template.exporter = exporter();
            s.auth = Some(operator());
        }));
        let volume = pod(&d)
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "operator-password")
            .cloned()
            .unwrap_or_else(|| panic!("{mode:?}: no volume"));
        let secret = volume.secret.unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("orders-operator"));
        // Only the key the env var reads, under a fixed name.
        assert_eq!(
            secret.items.unwrap(),
            [KeyToPath {
                key: "pw".into(),
                path: "password".into(),
                mode: None,
            }]
        );
        assert_eq!(secret.default_mode, Some(0o440));
        // The env var reports a missing Secret; the volume must not hold the pod first.
        assert_eq!(secret.optional, Some(true));
        // In the valkey container alone, where the hooks run.
        let p = pod(&d);
        let mut mounted = Vec::new();
        for c in p
            .init_containers
            .iter()
            .flatten()
            .chain(p.containers.iter())
        {
            for m in c.volume_mounts.iter().flatten() {
                if m.name == "operator-password" {
                    assert_eq!(m.mount_path, "/etc/valkey-operator/operator");
                    assert_eq!(m.read_only, Some(true));
                    // The whole directory: a subPath mount never sees the Secret change.
                    assert_eq!(m.sub_path, None);
                    mounted.push(c.name.as_str());
                }
            }
        }
        assert_eq!(mounted, ["valkey"], "{mode:?}");
        assert_eq!(
            template_annotations(&d)[annotation],
            "/etc/valkey-operator/operator/password"
        );

        // Without an operator Secret (none, or the default user's only): none of it.
        for auth in [
            None,
            Some(crd_types::template::Auth {
                operator_secret_ref: None,
                ..operator()
            }),
        ] {
            let d = build(&node(mode, |s| {
                s.template.exporter = exporter();
                s.auth = auth;
            }));
            let json = serde_json::to_string(pod(&d)).unwrap();
            assert!(!json.contains("operator-password"), "{mode:?}: {json}");
            assert!(!template_annotations(&d).contains_key(annotation));
        }
    }
}

#[test]
fn restricted_security() {
    let d = build(&node(Mode::Cluster, |_| {}));
    let p = pod(&d);
    let psc = p.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(999));
    assert_eq!(psc.run_as_group, Some(999));
    assert_eq!(psc.fs_group, Some(999));
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let sc = container(&d, "valkey").security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    assert_eq!(p.enable_service_links, Some(false));
    assert_eq!(p.automount_service_account_token, Some(false));
    assert_eq!(p.termination_grace_period_seconds, Some(60));
}

#[test]
fn resources_and_scheduling_pass_through() {
    let resources = ResourceRequirements {
        requests: Some(BTreeMap::from([("memory".into(), Quantity("1Gi".into()))])),
        ..Default::default()
    };
    let toleration = Toleration {
        key: Some("dedicated".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    };
    let d = build(&node(Mode::Standalone, |s| {
        s.template.resources = Some(resources.clone());
        s.template.image_pull_policy = Some("Always".into());
        s.template.scheduling = Some(Scheduling {
            node_selector: BTreeMap::from([("disk".into(), "ssd".into())]),
            tolerations: vec![toleration.clone()],
            priority_class_name: Some("high".into()),
            ..Default::default()
        });
    }));
    let c = container(&d, "valkey");
    assert_eq!(c.resources.as_ref(), Some(&resources));
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    let p = pod(&d);
    assert_eq!(p.node_selector.as_ref().unwrap()["disk"], "ssd");
    assert_eq!(p.tolerations.as_deref(), Some(&[toleration][..]));
    assert_eq!(p.priority_class_name.as_deref(), Some("high"));
    assert_eq!(p.affinity, None);
    assert_eq!(p.topology_spread_constraints, None);
}

fn with_tls(mode: Mode, f: impl FnOnce(&mut crd_types::ValkeyNodeSpec)) -> DesiredWorkload {
    build(&node(mode, |s| {
        s.tls = Some(Tls {
            secret_name: "orders-tls".into(),
            auth_clients: Default::default(),
            plain_text_clients: false,
        });
        f(s);
    }))
}

fn exporter() -> Option<crd_types::template::Exporter> {
    Some(crd_types::template::Exporter {
        image: "oliver006/redis_exporter:v1.86.0".into(),
        port: 9121,
        resources: None,
    })
}

fn tls_mount_of(c: &Container) -> Option<k8s_openapi::api::core::v1::VolumeMount> {
    c.volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == TLS_VOLUME)
        .cloned()
}

#[test]
fn the_tls_secret_is_mounted_whole_and_only_with_tls() {
    let auth = || crd_types::template::Auth {
        password_secret_ref: Some(crate::workload::fixtures::secret("app")),
        operator_secret_ref: Some(crate::workload::fixtures::secret("op")),
        ..Default::default()
    };
    for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
        let plain = build(&node(mode, |s| {
            s.template.exporter = exporter();
            s.auth = Some(auth());
        }));
        assert!(
            pod(&plain)
                .volumes
                .iter()
                .flatten()
                .all(|v| v.name != "tls")
        );
        let p = pod(&plain);
        for c in p
            .containers
            .iter()
            .chain(p.init_containers.iter().flatten())
        {
            assert_eq!(tls_mount_of(c), None, "{}", c.name);
        }

        let d = with_tls(mode, |s| {
            s.template.exporter = exporter();
            s.auth = Some(auth());
        });
        let volume = pod(&d)
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "tls")
            .cloned()
            .unwrap();
        let secret = volume.secret.unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("orders-tls"));
        // A node without its certificate cannot serve: the pod waits for the Secret.
        assert_eq!(secret.optional, Some(false));
        // Readable by the valkey group (the pod's fsGroup), as the users Secret.
        assert_eq!(secret.default_mode, Some(0o440));
        let keys: Vec<_> = secret
            .items
            .unwrap()
            .into_iter()
            .map(|i| (i.key, i.path))
            .collect();
        let item = |k: &str| (k.to_string(), k.to_string());
        assert_eq!(keys, [item("tls.crt"), item("tls.key"), item("ca.crt")]);
        // Every container that serves or dials the node with its certificate; the
        // exporter-auth init container only writes a file, and the exporter presents no
        // certificate to a node that asks for none (authClients Never here).
        let p = pod(&d);
        let mut mounted = Vec::new();
        for c in p
            .init_containers
            .iter()
            .flatten()
            .chain(p.containers.iter())
        {
            if let Some(m) = tls_mount_of(c) {
                assert_eq!(m.mount_path, "/etc/valkey-tls");
                assert_eq!(m.read_only, Some(true));
                // The whole directory: a subPath mount never sees the Secret change.
                assert_eq!(m.sub_path, None);
                mounted.push(c.name.as_str());
            }
        }
        let expected: &[&str] = match mode {
            Mode::Sentinel => &["sentinel-config", "valkey"],
            _ => &["valkey"],
        };
        assert_eq!(mounted, expected, "{mode:?}");
    }
}

/// Every string in the pod spec, with where it is.
fn strings(v: &serde_json::Value, at: String, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::String(s) => out.push((at, s.clone())),
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                strings(x, format!("{at}/{i}"), out);
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                strings(x, format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_valkey_cli_in_a_tls_pod_uses_tls_with_a_client_certificate() {
    let flags = "valkey-cli --tls --cacert /etc/valkey-tls/ca.crt \
                 --cert /etc/valkey-tls/tls.crt --key /etc/valkey-tls/tls.key ";
    use crd_types::node::NodeReplication;
    let replication = || NodeReplication {
        primary_name: "g".into(),
        primary: Some("10.96.0.1".into()),
        monitored: true,
        ..Default::default()
    };
    let mut seen = std::collections::BTreeSet::new();
    for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
        for in_group in [false, true] {
            let f = |s: &mut crd_types::ValkeyNodeSpec| {
                s.template.exporter = exporter();
                if in_group && mode != Mode::Cluster {
                    s.replication = Some(replication());
                }
            };
            let json = serde_json::to_value(pod(&with_tls(mode, f))).unwrap();
            let mut all = Vec::new();
            strings(&json, String::new(), &mut all);
            for (at, s) in all {
                let calls = s.matches("valkey-cli").count();
                if calls == 0 {
                    continue;
                }
                assert_eq!(s.matches(flags).count(), calls, "{mode:?} {at}: {s}");
                seen.insert(at.replace(|c: char| c.is_ascii_digit(), "N"));
            }
            // And without TLS, not one flag.
            let plain = serde_json::to_string(pod(&build(&node(mode, f)))).unwrap();
            assert!(!plain.contains("--tls"), "{mode:?}");
        }
    }
    // The readiness probes, the start scripts, the init container and both hooks.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [
            "/containers/N/command/N",
            "/containers/N/lifecycle/preStop/exec/command/N",
            "/containers/N/readinessProbe/exec/command/N",
            "/initContainers/N/command/N",
        ]
    );
}

#[test]
fn the_readiness_probe_pings_over_tls() {
    for (mode, port) in [
        (Mode::Standalone, 6379),
        (Mode::Cluster, 6379),
        (Mode::Sentinel, 26379),
    ] {
        let d = with_tls(mode, |_| {});
        let probe = container(&d, "valkey").readiness_probe.clone().unwrap();
        assert_eq!(
            probe.exec.unwrap().command.unwrap(),
            [
                "sh".to_string(),
                "-c".into(),
                format!(
                    "valkey-cli --tls --cacert /etc/valkey-tls/ca.crt \
                     --cert /etc/valkey-tls/tls.crt --key /etc/valkey-tls/tls.key \
                     -h \"$POD_IP\" -p {port} ping | grep -q PONG"
                )
            ]
        );
        // The TCP probes and the ports do not change.
        let plain = build(&node(mode, |_| {}));
        let c = container(&d, "valkey");
        let p = container(&plain, "valkey");
        assert_eq!(c.startup_probe, p.startup_probe);
        assert_eq!(c.liveness_probe, p.liveness_probe);
        assert_eq!(c.ports, p.ports);
    }
}

#[test]
fn a_tls_node_reloads_its_certificate_itself_where_it_can_and_says_so() {
    use crate::config::tls::auto_reload_script;
    use crate::workload::fixtures::template_annotations;
    for mode in [Mode::Standalone, Mode::Cluster, Mode::Sentinel] {
        let d = with_tls(mode, |_| {});
        let start = &container(&d, "valkey").command.as_ref().unwrap()[2];
        let reload = start.find(&auto_reload_script()).expect("the reload lines");
        assert!(start[reload..].ends_with("exec \"$0\" \"$@\""), "{start}");
        assert_eq!(
            template_annotations(&d)[names::annotations::TLS_AUTO_RELOAD_SECONDS],
            "10"
        );
    }
    let plain = build(&node(Mode::Sentinel, |_| {}));
    let start = container(&plain, "valkey").command.clone().unwrap();
    assert!(!start.concat().contains("tls-auto-reload"), "{start:?}");
    assert!(
        !template_annotations(&plain).contains_key(names::annotations::TLS_AUTO_RELOAD_SECONDS)
    );
}

#[test]
fn the_start_scripts_and_hooks_run_valkey_cli_over_tls() {
    use crate::config::tls::{cli_flags, cli_over_tls};
    use crate::workload::scripts;
    use crd_types::node::NodeReplication;
    let flags = cli_flags();
    let tls = Tls {
        secret_name: "orders-tls".into(),
        auth_clients: Default::default(),
        plain_text_clients: false,
    };
    let group = |s: &mut crd_types::ValkeyNodeSpec| {
        s.replication = Some(NodeReplication {
            primary_name: "g".into(),
            ..Default::default()
        })
    };
    let pre_stop = |c: &Container| {
        c.lifecycle
            .clone()
            .unwrap()
            .pre_stop
            .unwrap()
            .exec
            .unwrap()
            .command
            .unwrap()[2]
            .clone()
    };
    let d = with_tls(Mode::Standalone, group);
    let c = container(&d, "valkey");
    let start = &c.command.as_ref().unwrap()[2];
    assert!(
        start.contains(&format!("timeout 2 valkey-cli {flags} --no-auth-warning")),
        "{start}"
    );
    assert_eq!(
        pre_stop(c),
        cli_over_tls(&scripts::data_pre_stop(), Some(&tls))
    );
    let d = with_tls(Mode::Cluster, |_| {});
    let hook = pre_stop(container(&d, "valkey"));
    assert!(hook.contains(&format!(
        "timeout 3 valkey-cli {flags} --no-auth-warning $login"
    )));
    let d = with_tls(Mode::Sentinel, group);
    let init = &pod(&d).init_containers.as_ref().unwrap()[0];
    assert_eq!(
        init.command.as_ref().unwrap()[2],
        cli_over_tls(&scripts::sentinel_init(), Some(&tls))
    );
}
