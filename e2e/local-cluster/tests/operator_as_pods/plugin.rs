//! `kubectl valkey`, the built binary, against a ValkeyReplication with the operator's CA,
//! every subcommand once, each checked by its effect: pause shows Paused and resume brings
//! Ready back, switchover moves `status.currentPrimary` with the outcome Succeeded, replace-ca
//! starts a CA replacement in status, rotate-password changes the Secret and the group takes
//! the new password, and report's tarball holds the expected files and no password.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crd_types::cluster::Phase;
use crd_types::template::TlsAuthClients;
use e2e_kit::replication_testing::{self, ReplicationApis, access, valkey_replication};
use e2e_kit::topology::{ca_replacement, issued, paused};
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use local_cluster::workspace_binary;

use super::{FORM, Installed, NS, SERIAL, install};

/// Runs the plugin with the cluster's admin kubeconfig; (exit code, stdout, stderr).
fn plugin(env: &Installed, args: &[&str]) -> (i32, String, String) {
    let binary = workspace_binary("kubectl-valkey")
        .expect("the plugin built first: cargo build -p kubectl-valkey");
    let started = Instant::now();
    let output = Command::new(binary)
        .args(args)
        .arg("--kubeconfig")
        .arg(&env.cluster.admin_kubeconfig)
        .args(["-n", NS])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    eprintln!(
        "$ kubectl valkey {} ({:.1}s)\n{stdout}{stderr}",
        args.join(" "),
        started.elapsed().as_secs_f64()
    );
    (output.status.code().unwrap_or(-1), stdout, stderr)
}

/// The plugin's stdout, once it succeeded.
fn ok(env: &Installed, args: &[&str]) -> String {
    let (code, stdout, stderr) = plugin(env, args);
    assert_eq!(code, 0, "kubectl valkey {args:?} failed: {stderr}");
    stdout
}

/// Every value of every Secret of the namespace, as text.
async fn secret_values(env: &Installed) -> Vec<String> {
    let secrets: kube::Api<Secret> = kube::Api::namespaced(env.client.clone(), NS);
    secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .flat_map(|s| s.data.unwrap_or_default().into_values())
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .collect()
}

/// Every file under `dir`, relative to it, with its text.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                out.push((relative, text));
            }
        }
    }
    out.sort();
    out
}

/// The report of `name`, unpacked: its files by path.
fn unpack(env: &Installed, name: &str) -> Vec<(String, String)> {
    let tarball: PathBuf = env._run.path().join("report.tar.gz");
    let out = ok(env, &["report", name, "-o", tarball.to_str().unwrap()]);
    assert!(out.contains("wrote"), "{out}");
    let dir = env._run.path().join("report");
    std::fs::create_dir_all(&dir).unwrap();
    let tar = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(tar.success());
    files(&dir.join(format!("{name}-report")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_valkey_drives_every_subcommand() {
    let _serial = SERIAL.lock().await;
    let env = install("all").await;
    let name = "plugged";
    let groups = ReplicationApis::new(&env.client, NS);
    let mut group = valkey_replication(name, 2, 3, false);
    group.spec.common.tls = Some(issued::operator_issued(TlsAuthClients::Never));
    groups.create(&group).await.unwrap();
    env.wait("the group to be Ready", FORM, || {
        replication_testing::ready_status(&groups, name)
    })
    .await;

    // A name that is no topology: one line, exit code 1.
    let (code, _, stderr) = plugin(&env, &["status", "nothing-here"]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("error: ") && stderr.trim_end().lines().count() == 1,
        "{stderr}"
    );

    // status: the members, conditions and certificates status holds.
    let status = ok(&env, &["status", name]);
    assert!(
        status.starts_with(&format!("ValkeyReplication {NS}/{name}\nPhase: Ready")),
        "{status}"
    );
    for member in [
        format!("{name}-0"),
        format!("{name}-1"),
        format!("{name}-sentinel-2"),
    ] {
        assert!(status.contains(&member), "{member} missing:\n{status}");
    }
    assert!(
        status.contains("Primary") && status.contains("Replica") && status.contains("Sentinel")
    );
    assert!(status.contains("Conditions:\nTYPE") && status.contains(&format!("Secret {name}-ca")));

    // pause: status says Paused for the generation held; resume: Ready again.
    assert!(ok(&env, &["pause", name]).contains("paused"));
    let generation = groups.groups.get(name).await.unwrap().metadata.generation;
    let held = env
        .wait("the group to say Paused", FORM, || {
            paused::paused_at(&groups, name, generation)
        })
        .await;
    paused::assert_paused(&held);
    assert!(ok(&env, &["status", name]).contains("Phase: Paused"));
    assert!(ok(&env, &["resume", name]).contains("resumed"));
    env.wait("the group to be Ready after resume", FORM, || async {
        let status = replication_testing::ready_status(&groups, name).await?;
        Ok(status.and_then(|s| match s.phase {
            Some(Phase::Ready) => Ok(s),
            other => Err(format!("phase {other:?}")),
        }))
    })
    .await;

    // switchover: the other data node becomes status.currentPrimary, outcome Succeeded.
    let before = groups.groups.get(name).await.unwrap().status.unwrap();
    let primary = before.current_primary.clone().unwrap();
    let target = [format!("{name}-0"), format!("{name}-1")]
        .into_iter()
        .find(|m| *m != primary)
        .unwrap();
    let out = ok(&env, &["switchover", name, &target, "--timeout", "4m"]);
    assert!(out.contains("Succeeded"), "{out}");
    let after = groups.groups.get(name).await.unwrap().status.unwrap();
    assert_eq!(after.current_primary.as_deref(), Some(target.as_str()));
    let outcome = after.switchover.unwrap();
    assert!(outcome.id.starts_with("kubectl-valkey-"), "{outcome:?}");
    assert_eq!(format!("{:?}", outcome.outcome), "Succeeded");

    // replace-ca: status reports the replacement (members trust both CAs for the default
    // day of overlap).
    let out = ok(&env, &["replace-ca", name]);
    assert!(
        out.contains("valkey.rs/replace-ca=kubectl-valkey-"),
        "{out}"
    );
    let replacement = env
        .wait("the CA replacement in status", FORM, || {
            ca_replacement::trusting_both(&groups, name)
        })
        .await;
    eprintln!("CA replacement: {replacement:?}");
    assert!(ok(&env, &["status", name]).contains("CA replacement: Trusting"));

    // rotate-password: the Secret changes and the group takes the new password.
    let secret = format!("{name}-auth");
    let old = access(&groups, name).await.unwrap().password;
    let out = ok(&env, &["rotate-password", name]);
    assert!(
        out.contains(&format!("secret/{secret} updated")) && out.contains("Next:"),
        "{out}"
    );
    assert!(!out.contains(&old));
    let rotated = access(&groups, name).await.unwrap();
    assert_ne!(rotated.password, old, "the Secret holds a new password");
    assert!(
        !out.contains(&rotated.password),
        "the plugin never prints it"
    );
    let primary_ip = rotated.ip(&target).unwrap().to_string();
    env.wait("a login with the new password", FORM, || async {
        let reply = rotated.cli(&primary_ip, &["PING"]);
        Ok(if reply == "PONG" { Ok(()) } else { Err(reply) })
    })
    .await;
    // A user the spec does not list is refused: no Secret is written or created.
    let (code, _, stderr) = plugin(&env, &["rotate-password", name, "--which", "user:nobody"]);
    assert_eq!(code, 1, "{stderr}");

    // report: the expected files, and no password of any Secret (old or new) anywhere.
    let report = unpack(&env, name);
    let paths: Vec<&str> = report.iter().map(|(p, _)| p.as_str()).collect();
    eprintln!("report files: {paths:?}");
    let text = |path: &str| -> &str {
        &report
            .iter()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("{path} missing from {paths:?}"))
            .1
    };
    assert!(text(&format!("valkeyreplication-{name}.yaml")).contains("currentPrimary"));
    assert!(text("status.txt").contains("Members:"));
    assert!(text("events.yaml").contains("involvedObject"));
    for member in [format!("{name}-0"), format!("{name}-1")] {
        assert!(text(&format!("valkeynodes/{member}.yaml")).contains("kind: ValkeyNode"));
        let info = text(&format!("members/{member}/info.txt"));
        assert!(info.contains("role:"), "{member}: {info}");
    }
    let masters = text(&format!("members/{name}-sentinel-0/sentinel-masters.txt"));
    assert!(masters.contains(name), "{masters}");
    assert!(
        paths.iter().any(
            |p| p.starts_with("logs/valkey-operator-topology-controller") && p.ends_with(".log")
        ),
        "{paths:?}"
    );
    let mut passwords = secret_values(&env).await;
    passwords.push(old);
    for (path, body) in &report {
        for password in passwords
            .iter()
            .flat_map(|p| p.lines())
            .filter(|p| p.len() >= 16)
        {
            assert!(!body.contains(password), "{path} holds a Secret's value");
        }
    }

    let mut env = env;
    env.cluster.stop().unwrap();
}
