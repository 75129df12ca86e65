//! The cluster's certificates and keys, generated in-process with rcgen: one CA signs the
//! API server's serving certificate and every client certificate.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A client identity: the user name (CN) and groups (O) the API server sees.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    /// File stem under `pki/`.
    pub file: &'static str,
    pub user: &'static str,
    pub group: Option<&'static str>,
}

pub const ADMIN: Identity = Identity {
    file: "admin",
    user: "local-admin",
    group: Some("system:masters"),
};
pub const CONTROLLER_MANAGER: Identity = Identity {
    file: "controller-manager",
    user: "system:kube-controller-manager",
    group: None,
};
pub const SCHEDULER: Identity = Identity {
    file: "scheduler",
    user: "system:kube-scheduler",
    group: None,
};
/// The API server's identity towards the node agent's kubelet API. Not a superuser: the
/// kubelet authorizes it with a SubjectAccessReview, and the launcher binds it to
/// `system:kubelet-api-admin` (as kubeadm does).
pub const KUBELET_CLIENT: Identity = Identity {
    file: "apiserver-kubelet-client",
    user: "kube-apiserver-kubelet-client",
    group: None,
};

/// Paths of everything written by [`write`].
#[derive(Debug, Clone)]
pub struct PkiPaths {
    pub dir: PathBuf,
}

impl PkiPaths {
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn serving_cert(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }
    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }
    /// Service-account token signing key.
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("service-account.key")
    }
    /// Its public half, which verifies tokens (the API server reads no public key from a
    /// PKCS#8 private key file).
    pub fn service_account_public_key(&self) -> PathBuf {
        self.dir.join("service-account.pub")
    }
    pub fn client_cert(&self, id: Identity) -> PathBuf {
        self.dir.join(format!("{}.crt", id.file))
    }
    pub fn client_key(&self, id: Identity) -> PathBuf {
        self.dir.join(format!("{}.key", id.file))
    }
    /// The kubelet API's serving certificate, signed by the CA (as `serverTLSBootstrap`
    /// gets one), for the Nodes' InternalIP.
    pub fn kubelet_serving_cert(&self) -> PathBuf {
        self.dir.join("kubelet-serving.crt")
    }
    pub fn kubelet_serving_key(&self) -> PathBuf {
        self.dir.join("kubelet-serving.key")
    }
}

/// The names and addresses the API server's certificate must cover: loopback, the
/// in-cluster `kubernetes` Service names and its ClusterIP.
pub fn serving_names(kubernetes_service_ip: IpAddr) -> Vec<String> {
    vec![
        "localhost".into(),
        "127.0.0.1".into(),
        "kubernetes".into(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        "kubernetes.default.svc.cluster.local".into(),
        kubernetes_service_ip.to_string(),
    ]
}

/// Generates the CA, the serving certificate, the client certificates of `clients`, the
/// kubelet serving certificate for `kubelet_ip` and the service-account key into `dir`
/// (private keys mode 0600).
pub fn write(
    dir: &Path,
    kubernetes_service_ip: IpAddr,
    kubelet_ip: IpAddr,
    clients: &[Identity],
) -> Result<PkiPaths> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let paths = PkiPaths {
        dir: dir.to_path_buf(),
    };

    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "valkey-operator local cluster CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    write_file(&paths.ca_cert(), &ca.pem(), false)?;

    let mut serving = CertificateParams::new(serving_names(kubernetes_service_ip))?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = serving.signed_by(&key, &ca)?;
    write_file(&paths.serving_cert(), &cert.pem(), false)?;
    write_file(&paths.serving_key(), &key.serialize_pem(), true)?;

    let mut kubelet = CertificateParams::new(vec![kubelet_ip.to_string()])?;
    kubelet
        .distinguished_name
        .push(DnType::CommonName, "kubelet-serving");
    kubelet.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = kubelet.signed_by(&key, &ca)?;
    write_file(&paths.kubelet_serving_cert(), &cert.pem(), false)?;
    write_file(&paths.kubelet_serving_key(), &key.serialize_pem(), true)?;

    for id in clients {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, id.user);
        if let Some(group) = id.group {
            params
                .distinguished_name
                .push(DnType::OrganizationName, group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        write_file(&paths.client_cert(*id), &cert.pem(), false)?;
        write_file(&paths.client_key(*id), &key.serialize_pem(), true)?;
    }

    // ECDSA P-256: the API server signs service-account tokens with ES256.
    let service_account = KeyPair::generate()?;
    write_file(
        &paths.service_account_key(),
        &service_account.serialize_pem(),
        true,
    )?;
    write_file(
        &paths.service_account_public_key(),
        &service_account.public_key_pem(),
        false,
    )?;
    Ok(paths)
}

fn write_file(path: &Path, contents: &str, private: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mode = if private { 0o600 } else { 0o644 };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_file_with_private_keys_protected() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let paths = write(
            dir.path(),
            "127.100.0.1".parse().unwrap(),
            "10.250.1.2".parse().unwrap(),
            &[ADMIN, SCHEDULER],
        )
        .unwrap();
        for cert in [
            paths.ca_cert(),
            paths.serving_cert(),
            paths.client_cert(ADMIN),
            paths.kubelet_serving_cert(),
        ] {
            let pem = std::fs::read_to_string(&cert).unwrap();
            assert!(
                pem.starts_with("-----BEGIN CERTIFICATE-----"),
                "{}",
                cert.display()
            );
        }
        for key in [
            paths.serving_key(),
            paths.kubelet_serving_key(),
            paths.client_key(SCHEDULER),
            paths.service_account_key(),
        ] {
            let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", key.display());
            assert!(
                std::fs::read_to_string(&key)
                    .unwrap()
                    .contains("PRIVATE KEY")
            );
        }
        let public = std::fs::read_to_string(paths.service_account_public_key()).unwrap();
        assert!(public.starts_with("-----BEGIN PUBLIC KEY-----"));
        assert!(!paths.client_cert(CONTROLLER_MANAGER).exists());
    }

    #[test]
    fn serving_names_cover_loopback_and_the_kubernetes_service() {
        let names = serving_names("127.100.0.1".parse().unwrap());
        for expected in [
            "127.0.0.1",
            "localhost",
            "kubernetes.default.svc",
            "127.100.0.1",
        ] {
            assert!(names.iter().any(|n| n == expected), "{expected}");
        }
    }
}
