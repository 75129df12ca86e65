//! Command lines of the upstream control-plane components, and the waits for them.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::pki::PkiPaths;

/// Controllers of kube-controller-manager that stay off: Endpoints and EndpointSlices
/// reject loopback addresses, and the node agent's proxy resolves selectors itself.
pub const DISABLED_CONTROLLERS: &[&str] = &[
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
];

/// Every request at level Metadata (user, verb, object, status code, timestamps; no
/// bodies). RequestReceived is omitted, so a request is one ResponseComplete event and a
/// watch adds one ResponseStarted event when it opens.
pub const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
";

/// Where the binaries are and the ports and ranges a run uses.
#[derive(Debug, Clone)]
pub struct Layout {
    pub bin_dir: PathBuf,
    pub run_dir: PathBuf,
    pub etcd_client_port: u16,
    pub etcd_peer_port: u16,
    pub api_port: u16,
    /// ClusterIPs, loopback so Services are reachable through the node agent's proxy.
    pub service_cidr: String,
}

impl Layout {
    pub fn api_server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.api_port)
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    pub fn etcd(&self) -> Command {
        let client = format!("http://127.0.0.1:{}", self.etcd_client_port);
        let peer = format!("http://127.0.0.1:{}", self.etcd_peer_port);
        let mut cmd = Command::new(self.bin("etcd"));
        cmd.arg("--name=local")
            .arg(format!(
                "--data-dir={}",
                self.run_dir.join("etcd").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=local={peer}"))
            // A throw-away test cluster: durability of etcd itself is not under test.
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        cmd
    }

    pub fn api_server(&self, pki: &PkiPaths) -> Command {
        let kubelet = crate::pki::KUBELET_CLIENT;
        let mut cmd = Command::new(self.bin("kube-apiserver"));
        cmd.arg(format!(
            "--etcd-servers=http://127.0.0.1:{}",
            self.etcd_client_port
        ))
        .arg(format!("--secure-port={}", self.api_port))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--service-cluster-ip-range={}", self.service_cidr))
        // Endpoints of the kubernetes Service would be loopback, which validation refuses.
        .arg("--endpoint-reconciler-type=none")
        .arg(format!("--tls-cert-file={}", pki.serving_cert().display()))
        .arg(format!(
            "--tls-private-key-file={}",
            pki.serving_key().display()
        ))
        .arg(format!("--client-ca-file={}", pki.ca_cert().display()))
        .arg("--authorization-mode=Node,RBAC")
        .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
        .arg(format!(
            "--service-account-key-file={}",
            pki.service_account_public_key().display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            pki.service_account_key().display()
        ))
        .arg(format!(
            "--kubelet-client-certificate={}",
            pki.client_cert(kubelet).display()
        ))
        .arg(format!(
            "--kubelet-client-key={}",
            pki.client_key(kubelet).display()
        ))
        .arg("--kubelet-preferred-address-types=InternalIP")
        .arg("--allow-privileged=true")
        .arg("--profiling=false")
        .arg("--v=1");
        cmd
    }

    /// Opt-in audit logging (benchmarks count API requests per user from it): writes
    /// [`AUDIT_POLICY`] into the run directory and points `api_server` at it. Returns the
    /// path of the log, one JSON event per line.
    pub fn enable_audit(&self, api_server: &mut Command) -> Result<PathBuf> {
        let policy = self.run_dir.join("audit-policy.yaml");
        let log = self.run_dir.join("audit.log");
        std::fs::write(&policy, AUDIT_POLICY)
            .with_context(|| format!("writing {}", policy.display()))?;
        api_server
            .arg(format!("--audit-policy-file={}", policy.display()))
            .arg(format!("--audit-log-path={}", log.display()))
            // One JSON line per event, written as it happens, never rotated.
            .arg("--audit-log-format=json")
            .arg("--audit-log-mode=blocking")
            .arg("--audit-log-maxsize=0");
        Ok(log)
    }

    pub fn controller_manager(&self, pki: &PkiPaths, kubeconfig: &Path) -> Command {
        let controllers = std::iter::once("*".to_string())
            .chain(DISABLED_CONTROLLERS.iter().map(|c| format!("-{c}")))
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = Command::new(self.bin("kube-controller-manager"));
        // No --authentication-kubeconfig: with --secure-port=0 it only adds log noise
        // about a missing request-header CA.
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--bind-address=127.0.0.1")
            .arg("--secure-port=0")
            .arg("--leader-elect=false")
            .arg(format!("--controllers={controllers}"))
            .arg(format!("--service-cluster-ip-range={}", self.service_cidr))
            .arg(format!(
                "--service-account-private-key-file={}",
                pki.service_account_key().display()
            ))
            .arg(format!("--root-ca-file={}", pki.ca_cert().display()))
            .arg("--use-service-account-credentials=true")
            .arg("--v=1");
        cmd
    }

    pub fn scheduler(&self, kubeconfig: &Path) -> Command {
        let mut cmd = Command::new(self.bin("kube-scheduler"));
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--bind-address=127.0.0.1")
            .arg("--secure-port=0")
            .arg("--leader-elect=false")
            .arg("--v=1");
        cmd
    }
}

/// The first address of a CIDR: the ClusterIP of the `kubernetes` Service.
pub fn first_service_ip(cidr: &str) -> Result<Ipv4Addr> {
    let (base, _) = cidr
        .split_once('/')
        .with_context(|| format!("{cidr} is not a CIDR"))?;
    let base: Ipv4Addr = base
        .parse()
        .with_context(|| format!("{cidr} is not IPv4"))?;
    Ok(Ipv4Addr::from(u32::from(base) + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            bin_dir: "/k8s/bin".into(),
            run_dir: "/run/x".into(),
            etcd_client_port: 2379,
            etcd_peer_port: 2380,
            api_port: 6443,
            service_cidr: "127.100.0.0/16".into(),
        }
    }

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn api_server_uses_the_loopback_layout() {
        let pki = PkiPaths {
            dir: "/run/x/pki".into(),
        };
        let cmd = layout().api_server(&pki);
        assert_eq!(cmd.get_program(), "/k8s/bin/kube-apiserver");
        let args = args(&cmd);
        for expected in [
            "--etcd-servers=http://127.0.0.1:2379",
            "--secure-port=6443",
            "--service-cluster-ip-range=127.100.0.0/16",
            "--endpoint-reconciler-type=none",
            "--advertise-address=127.0.0.1",
            "--client-ca-file=/run/x/pki/ca.crt",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "missing {expected}: {args:?}"
            );
        }
    }

    #[test]
    fn controller_manager_turns_off_the_endpoint_controllers() {
        let pki = PkiPaths { dir: "/p".into() };
        let args = args(&layout().controller_manager(&pki, Path::new("/cm.kubeconfig")));
        let controllers = args
            .iter()
            .find(|a| a.starts_with("--controllers="))
            .unwrap();
        assert!(controllers.starts_with("--controllers=*,"));
        for disabled in DISABLED_CONTROLLERS {
            assert!(controllers.contains(&format!("-{disabled}")));
        }
    }

    #[test]
    fn audit_logging_is_opt_in() {
        let run = tempfile::tempdir().unwrap();
        let layout = Layout {
            run_dir: run.path().into(),
            ..layout()
        };
        let pki = PkiPaths { dir: "/p".into() };
        let mut cmd = layout.api_server(&pki);
        assert!(!args(&cmd).iter().any(|a| a.starts_with("--audit")));
        let log = layout.enable_audit(&mut cmd).unwrap();
        let args = args(&cmd);
        let policy = run.path().join("audit-policy.yaml");
        assert!(args.contains(&format!("--audit-policy-file={}", policy.display())));
        assert!(args.contains(&format!("--audit-log-path={}", log.display())));
        assert_eq!(std::fs::read_to_string(policy).unwrap(), AUDIT_POLICY);
    }

    #[test]
    fn kubernetes_service_ip_is_the_first_of_the_range() {
        assert_eq!(
            first_service_ip("127.100.0.0/16").unwrap(),
            Ipv4Addr::new(127, 100, 0, 1)
        );
        assert!(first_service_ip("nonsense").is_err());
    }
}
