//! The server binary as an operator runs it: `--help` and `--version` answer, an unknown
//! argument is refused, and bad configuration stops it, each before it touches the database;
//! SIGTERM ends it within its grace period even while a client stalls.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sb_process_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn server(vars: &[(&str, String)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_server"));
    command
        .env_clear()
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in vars {
        command.env(name, value);
    }
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_exits_1_with_one_line_before_opening_the_database() {
    let dir = temp_dir("bad_config");
    let db = dir.join("never.db");
    for (variable, value) in [
        ("PATH_PREFIX", "api"),
        ("PATH_PREFIX", "/{x}"),
        ("HOLD_TTL_SECONDS", "0"),
        ("MAX_CONNECTIONS", "lots"),
        ("ADMIN_TOKEN", "too-short"),
        ("ADMIN_TOKEN", "has a space in it, 16+"),
    ] {
        let output = server(&[
            ("DATABASE_URL", format!("sqlite://{}", db.display())),
            (variable, value.to_owned()),
        ])
        .output()
        .await
        .unwrap();
        assert_eq!(output.status.code(), Some(1), "{variable}={value}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{variable}={value}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: invalid {variable}: ")),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!db.exists(), "{variable}={value} opened the database");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs the binary with `args` in an empty directory and the defaults (no variable set), and
/// returns its output, the directory left as it was checked: nothing created in it. Fails
/// rather than hangs when the binary serves instead of answering.
async fn answer(args: &[&str]) -> std::process::Output {
    let dir = temp_dir(&format!("args_{}", args.join("_").replace(['-', '/'], "")));
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        server(&[]).args(args).current_dir(&dir).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("server {args:?} did not exit: it is serving"))
    .unwrap();
    let created: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(created.is_empty(), "server {args:?} created {created:?}");
    let _ = std::fs::remove_dir_all(dir);
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_and_version_answer_and_exit_0_without_opening_anything() {
    for args in [&["--help"][..], &["-h"]] {
        let output = answer(args).await;
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        let help = String::from_utf8_lossy(&output.stdout);
        for setting in slot_booking_server::config::SETTINGS {
            assert!(help.contains(&format!("--{} <", setting.flag)), "{help}");
            assert!(
                help.contains(&format!("[env: {}]", setting.variable)),
                "{help}"
            );
            let default = setting.default.unwrap_or("none");
            assert!(help.contains(&format!("[default: {default}]")), "{help}");
        }
        assert!(output.stderr.is_empty(), "{output:?}");
    }
    for args in [&["--version"][..], &["-V"]] {
        let output = answer(args).await;
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            format!("server {}", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_argument_exits_2_with_one_line_without_opening_anything() {
    for args in [
        &["--bogus"][..],
        &["serve"],
        &["--database-url"],
        &["--bind", "127.0.0.1:0", "extra"],
    ] {
        let output = answer(args).await;
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(output.stdout.is_empty(), "{output:?}");
    }
    // A bad value given as a flag is the configuration error its variable would be.
    let output = answer(&["--hold-ttl-seconds", "0"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).starts_with("error: invalid HOLD_TTL_SECONDS: ")
    );
}

/// Starts the binary and returns it with the address it serves on (from its log).
async fn started(vars: &[(&str, String)]) -> (Child, String) {
    let mut child = server(vars).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let address = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the server exited before serving");
        if let Some(rest) = line.split("serving on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_within_the_grace_period_while_a_client_stalls() {
    let dir = temp_dir("sigterm");
    let (mut child, address) = started(&[
        (
            "DATABASE_URL",
            format!("sqlite://{}", dir.join("s.db").display()),
        ),
        ("BIND", "127.0.0.1:0".to_owned()),
        ("DEMO_SLOTS", "0".to_owned()),
        // Only the grace period can end the stalled connection.
        ("HEADER_TIMEOUT_SECONDS", "600".to_owned()),
        ("SHUTDOWN_GRACE_SECONDS", "1".to_owned()),
    ])
    .await;
    let mut stalled = TcpStream::connect(&address).await.unwrap();
    stalled
        .write_all(b"GET /slots/availability HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // A full request answered: the server is serving (and has accepted the stalled client).
    let mut normal = TcpStream::connect(&address).await.unwrap();
    normal
        .write_all(b"GET /slots/availability HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut normal, &mut answer)
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let pid = child.id().unwrap().to_string();
    let signalled = Instant::now();
    let kill = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the server did not exit after SIGTERM")
        .unwrap();
    let took = signalled.elapsed();
    assert!(status.success(), "{status}");
    // The grace period (1 s) plus start-up slack, far below the 600 s header timeout.
    assert!(took < Duration::from_secs(10), "exit took {took:?}");
    drop(stalled);
    let _ = std::fs::remove_dir_all(dir);
}

/// The binary as configured purges: with `HISTORY_RETENTION_SECONDS=1` it says so at start-up,
/// its consumer logs and acknowledges the demo slots' eight changes, and a purge round soon
/// deletes them (it logs the count), leaving the database's event log empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_retention_empties_the_event_log_of_the_running_server() {
    use slot_booking::{EventPosition, EventStore};

    let dir = temp_dir("retention");
    let url = format!("sqlite://{}", dir.join("r.db").display());
    let mut child = server(&[
        ("DATABASE_URL", url.clone()),
        ("BIND", "127.0.0.1:0".to_owned()),
        ("HISTORY_RETENTION_SECONDS", "1".to_owned()),
        ("REQUEST_LOG", "0".to_owned()),
    ])
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = Vec::new();
    let purged = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("the server exited");
            if line.contains("purged history older than the retention") {
                return line;
            }
            said.push(line);
        }
    })
    .await
    .expect("a purge round deleted the demo slots' changes within a minute");
    assert!(
        said.iter()
            .any(|line| line.contains("purging history older than 1 s every 1 s")),
        "{said:?}"
    );
    assert_eq!(
        said.iter()
            .filter(|line| line.contains("kind=slot_created"))
            .count(),
        8,
        "{said:?}"
    );
    assert!(purged.contains("events=8"), "{purged}");
    let store = slot_booking_sqlite::SqliteStore::connect(&url)
        .await
        .unwrap();
    let log = store
        .read_events_after(EventPosition::START, 100)
        .await
        .unwrap();
    assert!(log.is_empty(), "{log:?}");
    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
