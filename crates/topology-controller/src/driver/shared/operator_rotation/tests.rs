//! Which pods let the previous operator password go.

use k8s_openapi::api::core::v1::{PodSpec, SecretVolumeSource, Volume};

use super::*;

fn pod(annotated: bool, mounted: Option<&str>) -> Pod {
    let mut pod = Pod::default();
    if annotated {
        pod.metadata.annotations = Some(
            [(
                annotations::OPERATOR_PASSWORD_FILE.to_string(),
                "/etc/valkey-operator/operator/password".to_string(),
            )]
            .into(),
        );
    }
    pod.spec = Some(PodSpec {
        volumes: Some(
            mounted
                .map(|name| Volume {
                    name: "operator-password".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(name.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    });
    pod
}

#[test]
fn only_a_pod_mounting_the_current_secret_lets_the_previous_password_go() {
    assert!(reads_the_file(&pod(true, Some("op")), "op"));
    // Not rolled yet onto the Secret the spec names now.
    assert!(!reads_the_file(&pod(true, Some("old-op")), "op"));
    // An older operator's template.
    assert!(!reads_the_file(&pod(false, None), "op"));
    assert!(!reads_the_file(&pod(false, Some("op")), "op"));
}
