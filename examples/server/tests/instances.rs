//! Every instance sees every commit: two server processes on one database, each caching its
//! availability listing for an hour, and a cancel through one shows on the other within
//! moments, because each follows the database's changes (PostgreSQL `LISTEN`/`NOTIFY`, SQLite
//! `PRAGMA data_version` polling, MariaDB/MySQL reading the event log every 20 ms).
//!
//! Each trial creates a one-unit slot through instance A's admin route, holds and confirms its
//! unit through A, waits until instance B lists it with nothing left, cancels through A, and
//! polls B until the unit shows again (failing after 5 s). The delays from the cancel's
//! answer to B showing the unit are printed (p50, p99, max); they are not asserted on.

mod common;

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

const ADMIN_TOKEN: &str = "instances-e2e-admin-token";

/// How long a change may take to show on the other instance before the trial fails.
const DEADLINE: Duration = Duration::from_secs(5);

/// How long a server may take to start serving.
const STARTUP: Duration = Duration::from_secs(60);

/// The pause between two reads while polling an instance: paces the polling loop, so the
/// measured delay is exact to about this much.
const POLL_PACE: Duration = Duration::from_millis(1);

/// One server process. Dropping it kills the process (also when a test fails and unwinds).
struct Instance {
    name: &'static str,
    child: Child,
    base: String,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // `kill_on_drop` would too; this makes the guard explicit.
        let _ = self.child.start_kill();
    }
}

impl Instance {
    /// Starts the server binary on `database_url`, on a loopback port of the system's choice,
    /// with an hour-long cache period (only invalidation can refresh a listing), no demo
    /// slots and the admin routes; returns once it logs that it follows changes and serves.
    async fn start(name: &'static str, database_url: &str) -> Instance {
        let mut command = Command::new(env!("CARGO_BIN_EXE_server"));
        command
            .env_clear()
            .env("RUST_BACKTRACE", "1")
            .env("DATABASE_URL", database_url)
            .env("BIND", "127.0.0.1:0")
            .env("DEMO_SLOTS", "0")
            .env("CACHE_PERIOD_SECONDS", "3600")
            .env("ADMIN_TOKEN", ADMIN_TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("cannot start the server binary");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
        // Read to its end, for the message of a server that exits before serving.
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text).await;
            text
        });
        let mut instance = Instance {
            name,
            child,
            base: String::new(),
        };
        let mut lines = BufReader::new(stdout).lines();
        let mut following = false;
        let ready = tokio::time::timeout(STARTUP, async {
            while let Ok(Some(line)) = lines.next_line().await {
                following |= line.contains("following changes in the");
                if let Some(rest) = line.split("serving on http://").nth(1) {
                    let address = rest.split_whitespace().next().unwrap_or_default();
                    return Some(format!("http://{address}"));
                }
            }
            None
        })
        .await;
        match ready {
            Ok(Some(base)) => instance.base = base,
            Ok(None) => {
                let status = instance.child.wait().await;
                let stderr = tokio::time::timeout(STARTUP, stderr).await;
                panic!("server {name} exited before serving ({status:?}): {stderr:?}");
            }
            Err(_) => panic!("server {name} did not serve within {STARTUP:?}"),
        }
        assert!(
            following,
            "server {name} served without logging that it follows changes"
        );
        // Keep draining the log so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        instance
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// Status and JSON body of a response.
async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// What `instance` lists for `slot`: `None` while it does not list the slot, else its
/// remaining units.
async fn remaining_on(http: &reqwest::Client, instance: &Instance, slot: i64) -> Option<i64> {
    let (status, body) = read(
        http.get(instance.url("/slots/availability"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "availability on {}: {body}", instance.name);
    body["slots"]
        .as_array()
        .unwrap_or_else(|| panic!("no slots listed: {body}"))
        .iter()
        .find(|entry| entry["slot_id"] == slot)
        .map(|entry| entry["remaining"].as_i64().unwrap_or(-1))
}

/// Polls `instance` until it lists `slot` with `remaining` units, and returns how long that
/// took; fails after [`DEADLINE`], or when it lists another number than `remaining` (or
/// `stale`, what it may show until the change arrives).
async fn await_remaining(
    http: &reqwest::Client,
    instance: &Instance,
    slot: i64,
    stale: Option<i64>,
    remaining: i64,
) -> Duration {
    let started = Instant::now();
    loop {
        let seen = remaining_on(http, instance, slot).await;
        if seen == Some(remaining) {
            return started.elapsed();
        }
        assert_eq!(
            seen, stale,
            "{} lists slot {slot} with neither the old nor the new units",
            instance.name
        );
        assert!(
            started.elapsed() < DEADLINE,
            "{} still lists slot {slot} as {seen:?} after {DEADLINE:?}, not {remaining} left",
            instance.name
        );
        tokio::time::sleep(POLL_PACE).await;
    }
}

/// One trial (see the module docs): returns the delay from the cancel's answer on `a` to `b`
/// showing the unit again.
async fn trial(http: &reqwest::Client, a: &Instance, b: &Instance, n: usize) -> Duration {
    // A slot of its own per trial, in the future (a day ahead, a minute apart per trial).
    let starts_at = chrono::Utc::now() + chrono::Duration::days(1);
    let starts_at = starts_at + chrono::Duration::minutes(n as i64);
    let body = serde_json::json!({
        "starts_at": starts_at.to_rfc3339(),
        "ends_at": (starts_at + chrono::Duration::hours(1)).to_rfc3339(),
        "capacity": 1,
    });
    let (status, slot) = read(
        http.post(a.url("/admin/slots"))
            .bearer_auth(ADMIN_TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{slot}");
    let slot = slot["slot_id"].as_i64().unwrap();

    let (status, hold) = read(
        http.post(a.url(&format!("/slots/{slot}/hold")))
            .header("idempotency-key", format!("trial-{n}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{hold}");
    common::assert_fields(&hold, &common::HOLD_FIELDS);
    let hold = hold["hold_id"].as_i64().unwrap();
    let (status, body) = read(
        http.post(a.url(&format!("/holds/{hold}/confirm")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("confirmed")));

    // B learns of the new slot from A's insert (it may list its old listing, without the
    // slot, until then), and by then the unit is taken: 0 left, cached from here on.
    await_remaining(http, b, slot, None, 0).await;
    assert_eq!(
        remaining_on(http, b, slot).await,
        Some(0),
        "{} cached listing",
        b.name
    );

    let (status, body) = read(
        http.delete(a.url(&format!("/holds/{hold}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")));
    // From the commit's answer on A to the unit showing on B.
    await_remaining(http, b, slot, Some(0), 1).await
}

/// Runs `trials` trials against two instances started on `database_url` and prints the
/// delays.
async fn two_instances_see_each_others_cancels(backend: &str, database_url: &str, trials: usize) {
    // One after the other: the first creates and migrates the database.
    let a = Instance::start("A", database_url).await;
    let b = Instance::start("B", database_url).await;
    let http = reqwest::Client::new();
    let mut delays = Vec::with_capacity(trials);
    for n in 0..trials {
        delays.push(trial(&http, &a, &b, n).await);
    }
    delays.sort_unstable();
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{backend}: cancel on A -> unit visible on B (cache period 3600 s), {trials} trials: \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(at(0.50)),
        ms(at(0.99)),
        ms(at(1.0)),
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_instances_see_each_others_cancels() {
    let Some(url) = common::postgres_url().await else {
        return;
    };
    two_instances_see_each_others_cancels("postgres", &url, 50).await;
    common::drop_postgres(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_instances_see_each_others_cancels() {
    let Some(url) = common::mysql_url().await else {
        return;
    };
    two_instances_see_each_others_cancels("mysql", &url, 50).await;
    common::drop_mysql(&url).await;
}

/// The same through MariaDB's other scheme, as sqlx's MySQL driver takes it: `mariadb://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_scheme_instances_see_each_others_cancels() {
    let Some(url) = common::mysql_url().await else {
        return;
    };
    let mariadb = url.replacen("mysql://", "mariadb://", 1);
    assert!(mariadb.starts_with("mariadb://"), "{url}");
    two_instances_see_each_others_cancels("mariadb", &mariadb, 5).await;
    common::drop_mysql(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_instances_see_each_others_cancels() {
    let (url, dir) = common::sqlite_url().await;
    two_instances_see_each_others_cancels("sqlite", &url, 20).await;
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}
