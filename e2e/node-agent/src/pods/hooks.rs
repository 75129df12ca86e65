//! Container lifecycle hooks (postStart, preStop), run the way the kubelet
//! runs them: exec and httpGet reuse the probe code, sleep waits.

use std::process::ExitStatus;
use std::time::Duration;

use k8s_openapi::api::core::v1::LifecycleHandler;
use tokio::process::Child;
use tokio::sync::watch;
use tokio::time::Instant;

use super::probes::{self, Target};

/// The SIGTERM -> SIGKILL window a container gets at least after its preStop
/// hook, however long the hook took (the kubelet's minimum grace period).
pub const MIN_GRACE_AFTER_PRE_STOP: Duration = Duration::from_secs(2);

/// The kubelet puts no time limit on postStart; a stop request still cuts it short.
pub const POST_START_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Runs one hook handler within `timeout`; Err carries the failure message.
pub async fn run(h: &LifecycleHandler, target: &Target, timeout: Duration) -> Result<(), String> {
    let action = async {
        if let Some(exec) = &h.exec {
            return probes::exec_action(exec, target, timeout).await;
        }
        if let Some(http) = &h.http_get {
            // Like the kubelet, any answer counts: the status code is not judged.
            return probes::http_get(http, target, timeout, "kube-lifecycle/1.36")
                .await
                .map(|_| ());
        }
        if let Some(sleep) = &h.sleep {
            tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64)).await;
            return Ok(());
        }
        // tcpSocket is deprecated for hooks and does nothing.
        Ok(())
    };
    tokio::time::timeout(timeout, action)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "hook did not complete within {}s",
                timeout.as_secs()
            ))
        })
}

/// Runs `who`'s preStop hook for at most `grace`. Ok: the SIGTERM -> SIGKILL window
/// left; Err: the container exited meanwhile (nothing left to signal).
pub async fn pre_stop(
    h: &LifecycleHandler,
    who: &str,
    target: &Target,
    child: &mut Child,
    grace: Duration,
) -> Result<Duration, ExitStatus> {
    let t0 = Instant::now();
    tokio::select! {
        r = run(h, target, grace) => {
            // The kubelet proceeds with SIGTERM whatever the hook's outcome.
            match r {
                Err(msg) => tracing::info!(container = %who, %msg, "preStop hook failed"),
                Ok(()) => tracing::info!(container = %who, took = ?t0.elapsed(), "preStop hook done"),
            }
        }
        s = child.wait() => return Err(exit_status(s)),
    }
    Ok(remaining_grace(grace, t0.elapsed()))
}

/// How a postStart hook ended.
#[derive(Debug)]
pub enum PostStart {
    Done,
    Failed(String),
    /// The container exited while the hook ran.
    Exited(ExitStatus),
    /// A stop request (with its grace) arrived while the hook ran.
    Stop(Duration),
}

/// Runs a postStart hook, racing the container's exit and stop requests.
pub async fn post_start(
    h: &LifecycleHandler,
    target: &Target,
    child: &mut Child,
    stop: &mut watch::Receiver<Option<Duration>>,
) -> PostStart {
    if let Some(grace) = *stop.borrow() {
        return PostStart::Stop(grace);
    }
    tokio::select! {
        r = run(h, target, POST_START_TIMEOUT) => match r {
            Ok(()) => PostStart::Done,
            Err(msg) => PostStart::Failed(msg),
        },
        s = child.wait() => PostStart::Exited(exit_status(s)),
        _ = stop.changed() => PostStart::Stop(stop.borrow().unwrap_or_default()),
    }
}

fn exit_status(s: std::io::Result<ExitStatus>) -> ExitStatus {
    s.unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(1 << 8))
}

/// What is left of `grace` for SIGTERM -> SIGKILL after a preStop hook that
/// took `elapsed`: the hook's time counts against the grace period, but
/// never below the kubelet's minimum.
pub fn remaining_grace(grace: Duration, elapsed: Duration) -> Duration {
    grace.saturating_sub(elapsed).max(MIN_GRACE_AFTER_PRE_STOP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn handler(json: serde_json::Value) -> LifecycleHandler {
        serde_json::from_value(json).unwrap()
    }

    fn target() -> Target {
        Target {
            pod_ip: Ipv4Addr::LOCALHOST,
            container: serde_json::from_value(serde_json::json!({"name": "c"})).unwrap(),
            exec: None,
        }
    }

    #[test]
    fn grace_left_after_pre_stop() {
        let s = Duration::from_secs;
        assert_eq!(remaining_grace(s(30), s(10)), s(20));
        assert_eq!(remaining_grace(s(30), s(29)), s(2), "at least 2s");
        assert_eq!(remaining_grace(s(30), s(40)), s(2), "overrun");
        assert_eq!(remaining_grace(s(1), Duration::ZERO), s(2));
        assert_eq!(
            remaining_grace(s(10), Duration::from_millis(2500)),
            Duration::from_millis(7500)
        );
    }

    #[tokio::test]
    async fn sleep_is_cut_by_the_timeout() {
        let h = handler(serde_json::json!({"sleep": {"seconds": 0}}));
        assert_eq!(run(&h, &target(), Duration::from_secs(1)).await, Ok(()));
        let h = handler(serde_json::json!({"sleep": {"seconds": 600}}));
        let err = run(&h, &target(), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(err.contains("within 1s"), "{err}");
    }

    #[tokio::test]
    async fn exec_needs_a_running_container() {
        let h = handler(serde_json::json!({"exec": {"command": ["true"]}}));
        let err = run(&h, &target(), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(err.contains("not running"), "{err}");
    }

    #[tokio::test]
    async fn tcp_socket_is_ignored() {
        let h = handler(serde_json::json!({"tcpSocket": {"port": 1}}));
        assert_eq!(run(&h, &target(), Duration::from_secs(1)).await, Ok(()));
    }

    /// Serves one request with `status`; returns the request's text.
    async fn serve_once(status: u16) -> (u16, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 1024];
            let n = s.read(&mut buf).await.unwrap();
            let reply = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
            s.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        (port, task)
    }

    #[tokio::test]
    async fn http_get_accepts_any_answer() {
        for status in [200, 500] {
            let (port, server) = serve_once(status).await;
            let h = handler(serde_json::json!({"httpGet": {
                "path": "/drain", "port": port,
                "httpHeaders": [{"name": "X-Hook", "value": "preStop"}]
            }}));
            assert_eq!(run(&h, &target(), Duration::from_secs(5)).await, Ok(()));
            let request = server.await.unwrap();
            assert!(request.starts_with("GET /drain HTTP/1.1\r\n"), "{request}");
            assert!(request.contains("User-Agent: kube-lifecycle/"), "{request}");
            assert!(request.contains("X-Hook: preStop\r\n"), "{request}");
        }
    }

    #[tokio::test]
    async fn http_get_fails_without_a_server() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let h = handler(serde_json::json!({"httpGet": {"port": port}}));
        assert!(run(&h, &target(), Duration::from_secs(5)).await.is_err());
    }
}
