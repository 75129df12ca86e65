//! The valkey container's probes: started and alive mean accepting connections (a server
//! loading its data is both), ready means answering PING with PONG.

use crd_types::ValkeyNodeSpec;
use crd_types::template::PROBE_USER;
use k8s_openapi::api::core::v1::{ExecAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::layout::main_port;
use crate::config::{PASSWORD_ENV, POD_IP_ENV};

fn tcp_probe(port: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            host: None,
            port: IntOrString::String(port.into()),
        }),
        initial_delay_seconds: Some(0),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        success_threshold: Some(1),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

/// The readiness check: PING must answer PONG. A loading server answers `-LOADING` and a
/// dead one nothing, so only a server that can serve reads counts as ready. Exec probes do
/// not expand `$(VAR)`, hence the shell. `-h $POD_IP` because the local node agent binds
/// only the pod IP; in a real pod 0.0.0.0 covers it too. A member (data node or sentinel)
/// whose default user has a password is asked as the `probe` user, which may only PING and
/// needs no password (valkey-cli sends the REDISCLI_AUTH given here, which it ignores): the
/// default password can then change under a running pod, whose environment keeps the one
/// it started with, without failing the probe.
pub fn readiness_command(spec: &ValkeyNodeSpec) -> Vec<String> {
    let (port, _) = main_port(spec.mode);
    let login = if probe_logs_in_as_probe_user(spec) {
        format!("{PASSWORD_ENV}={PROBE_USER} valkey-cli --user {PROBE_USER} ")
    } else {
        "valkey-cli ".to_string()
    };
    vec![
        "sh".into(),
        "-c".into(),
        format!("{login}-h \"${POD_IP_ENV}\" -p {port} ping | grep -q PONG"),
    ]
}

/// Whether the node has the `probe` user: one whose default user has a password (see
/// [`crate::config::auth_file_script`] and [`crate::config::sentinel_auth_script`]).
fn probe_logs_in_as_probe_user(spec: &ValkeyNodeSpec) -> bool {
    spec.auth
        .as_ref()
        .is_some_and(|a| a.password_secret_ref.is_some())
}

/// Valkey listens before it loads its data, so this passes early; the generous budget
/// (10 minutes) covers slow volume attach and start-up, never killing a slow start. Every
/// second, because the first check at container start always misses and the period is then
/// what a new pod waits to be Ready (bench-nodes: 5 s at 5 s).
pub(super) fn startup(port_name: &str) -> Probe {
    tcp_probe(port_name, 1, 1, 600)
}

/// Alive = accepting connections, which a server busy loading does: never restart a loading
/// server. Six misses in a row (a minute) before a restart.
pub(super) fn liveness(port_name: &str) -> Probe {
    tcp_probe(port_name, 10, 5, 6)
}

/// Ready = [`readiness_command`] succeeds, twice missed before the pod leaves its Service.
pub(super) fn readiness(spec: &ValkeyNodeSpec) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(readiness_command(spec)),
        }),
        initial_delay_seconds: Some(0),
        period_seconds: Some(5),
        timeout_seconds: Some(5),
        success_threshold: Some(1),
        failure_threshold: Some(2),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crd_types::node::Mode;

    use crate::workload::fixtures::{build, container, node};

    #[test]
    fn probes_tell_loading_from_dead() {
        let d = build(&node(Mode::Standalone, |_| {}));
        let c = container(&d, "valkey");
        let startup = c.startup_probe.as_ref().unwrap();
        assert_eq!(
            startup.tcp_socket.as_ref().unwrap().port,
            IntOrString::String("valkey".into())
        );
        assert!(startup.failure_threshold.unwrap() * startup.period_seconds.unwrap() >= 300);
        assert!(c.liveness_probe.as_ref().unwrap().tcp_socket.is_some());
        let readiness = c.readiness_probe.as_ref().unwrap().exec.as_ref().unwrap();
        assert_eq!(
            readiness.command.as_ref().unwrap(),
            &[
                "sh",
                "-c",
                "valkey-cli -h \"$POD_IP\" -p 6379 ping | grep -q PONG"
            ]
        );
        assert!(readiness_command(&node(Mode::Sentinel, |_| {}).spec)[2].contains("-p 26379"));
    }

    #[test]
    fn a_member_with_a_password_is_probed_as_the_probe_user() {
        use crd_types::template::{Auth, SecretKeyRef};
        let with_password = |s: &mut ValkeyNodeSpec| {
            s.auth = Some(Auth {
                password_secret_ref: Some(SecretKeyRef {
                    name: "app".into(),
                    key: "password".into(),
                }),
                ..Default::default()
            })
        };
        for (mode, port) in [
            (Mode::Standalone, 6379),
            (Mode::Cluster, 6379),
            (Mode::Sentinel, 26379),
        ] {
            assert_eq!(
                readiness_command(&node(mode, with_password).spec)[2],
                format!(
                    "REDISCLI_AUTH=probe valkey-cli --user probe -h \"$POD_IP\" -p {port} ping | grep -q PONG"
                )
            );
        }
    }
}
