//! Restart: the example server under a concurrent hold/confirm/cancel load is killed with
//! SIGKILL and started again. Every hold that got a 2xx must be stored with that status (or
//! with the status of a later request whose answer the kill swallowed), and the capacity
//! invariant must hold for every slot — checked through the library on the same database.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slot_booking::conformance::kit::SlotTally;
use slot_booking::{BookingEngine, BookingError, HoldId, HoldStatus, NewSlot, SlotId};
use sqlx::{AssertSqlSafe, Connection};

/// Whether the PostgreSQL tests run, and where: shared with the PostgreSQL store's tests.
#[path = "../backends/postgres/tests/common/gate.rs"]
#[allow(dead_code)]
mod gate;

/// The example binary `cargo test` builds next to this test's own binary.
fn server_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let binary = profile_dir.join("examples").join("server");
    assert!(
        binary.exists(),
        "{} is missing: `cargo test` builds it, or run `cargo build --example server`",
        binary.display()
    );
    binary
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Server {
    child: Child,
    base: String,
}

impl Server {
    async fn start(database_url: &str, port: u16) -> Server {
        let child = Command::new(server_binary())
            .env("DATABASE_URL", database_url)
            .env("BIND", format!("127.0.0.1:{port}"))
            .env("DEMO_SLOTS", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server");
        let server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        for _ in 0..300 {
            if let Ok(response) = http
                .get(format!("{}/slots/availability", server.base))
                .send()
                .await
            {
                if response.status() == 200 {
                    return server;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server did not come up");
    }

    fn kill_9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        let exit = self.child.wait().expect("reap");
        assert!(exit.success(), "graceful shutdown exits 0, got {exit}");
    }
}

/// What the clients were told about a hold, and what they asked for without hearing back.
#[derive(Debug, Clone, Copy)]
struct Seen {
    slot: SlotId,
    acked: HoldStatus,
    pending: Option<HoldStatus>,
}

#[derive(Default)]
struct Ledger {
    holds: HashMap<HoldId, Seen>,
    keys: Vec<(SlotId, String)>,
}

async fn load(
    base: String,
    slots: Vec<SlotId>,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<tokio::sync::watch::Sender<usize>>,
    worker: u32,
) {
    let http = reqwest::Client::new();
    let mut n = 0u32;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let slot = slots[(worker + n) as usize % slots.len()];
        let key = format!("w{worker}-{n}");
        ledger.lock().unwrap().keys.push((slot, key.clone()));
        let Ok(response) = http
            .post(format!("{base}/slots/{slot}/hold"))
            .header("Idempotency-Key", &key)
            .send()
            .await
        else {
            continue;
        };
        if response.status() != 201 {
            continue;
        }
        let Ok(body) = response.json::<serde_json::Value>().await else {
            continue;
        };
        let Some(id) = body["hold_id"].as_i64().map(HoldId) else {
            continue;
        };
        ledger.lock().unwrap().holds.insert(
            id,
            Seen {
                slot,
                acked: HoldStatus::Held,
                pending: None,
            },
        );
        acknowledged.send_modify(|n| *n += 1);
        let steps: &[HoldStatus] = match n % 3 {
            0 => &[HoldStatus::Confirmed],
            1 => &[HoldStatus::Confirmed, HoldStatus::Cancelled],
            _ => &[HoldStatus::Cancelled],
        };
        for &step in steps {
            ledger.lock().unwrap().holds.get_mut(&id).unwrap().pending = Some(step);
            let request = match step {
                HoldStatus::Confirmed => http.post(format!("{base}/holds/{id}/confirm")),
                _ => http.delete(format!("{base}/holds/{id}")),
            };
            match request.send().await {
                Ok(response) if response.status() == 200 => {
                    let mut ledger = ledger.lock().unwrap();
                    let seen = ledger.holds.get_mut(&id).unwrap();
                    seen.acked = step;
                    seen.pending = None;
                }
                _ => break,
            }
        }
    }
}

async fn kill_mid_load_and_check(database_url: &str) {
    // Slots, through the library, before the server first starts.
    let store = slot_booking_server::open_store(database_url).await.unwrap();
    let engine = BookingEngine::new(Arc::clone(&store));
    let start = chrono::Utc::now() + chrono::Duration::days(1);
    let mut slots = Vec::new();
    for capacity in [3, 5, 8, 13, 40] {
        let slot = engine
            .create_slot(NewSlot::new(
                start,
                start + chrono::Duration::hours(1),
                capacity,
            ))
            .await
            .unwrap();
        slots.push(slot.slot_id);
    }

    let port = free_port();
    let server = Server::start(database_url, port).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let (acknowledged, mut acks) = tokio::sync::watch::channel(0usize);
    let acknowledged = Arc::new(acknowledged);
    let workers: Vec<_> = (0..12)
        .map(|w| {
            tokio::spawn(load(
                server.base.clone(),
                slots.clone(),
                Arc::clone(&ledger),
                Arc::clone(&stop),
                Arc::clone(&acknowledged),
                w,
            ))
        })
        .collect();
    // Kill once the load is really going (20 holds acknowledged), however slow the machine.
    tokio::time::timeout(Duration::from_secs(120), acks.wait_for(|n| *n >= 20))
        .await
        .expect("20 holds acknowledged within two minutes")
        .expect("the workers are alive");
    server.kill_9();
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }

    let server = Server::start(database_url, port).await;
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    assert!(
        ledger.holds.len() >= 20,
        "the load got going: {} holds",
        ledger.holds.len()
    );
    let unanswered = ledger
        .holds
        .values()
        .filter(|s| s.pending.is_some())
        .count();
    eprintln!(
        "restart: {} holds attempted, {} acknowledged, {unanswered} with a request unanswered at the kill",
        ledger.keys.len(),
        ledger.holds.len()
    );

    // Every acknowledged status survived the kill.
    for (&id, seen) in &ledger.holds {
        let stored = store
            .get_hold(id, &slot_booking::Scope::BackOffice, chrono::Utc::now())
            .await
            .unwrap()
            .outcome
            .expect("an acknowledged hold exists");
        assert_eq!(stored.slot_id, seen.slot);
        assert!(
            stored.status == seen.acked || Some(stored.status) == seen.pending,
            "hold {id}: stored {:?}, acknowledged {:?}, unanswered {:?}",
            stored.status,
            seen.acked,
            seen.pending
        );
    }

    // Every hold on every slot, including ones whose answer was lost: replaying each key
    // returns the hold it made (or places one now, which the invariant then counts too).
    let mut per_slot: HashMap<SlotId, Vec<HoldId>> = HashMap::new();
    for (slot, key) in &ledger.keys {
        match engine.hold(*slot, key).await {
            Ok(placed) => per_slot.entry(*slot).or_default().push(placed.hold.hold_id),
            Err(BookingError::SoldOut { .. }) => {}
            Err(other) => panic!("replaying {key}: {other}"),
        }
    }
    let now = chrono::Utc::now();
    for slot_id in &slots {
        let slot = store.get_slot(*slot_id).await.unwrap().unwrap();
        let mut holds = Vec::new();
        let mut ids = per_slot.remove(slot_id).unwrap_or_default();
        ids.sort();
        ids.dedup();
        for id in ids {
            let hold = store
                .get_hold(id, &slot_booking::Scope::BackOffice, now)
                .await
                .unwrap()
                .outcome
                .unwrap();
            holds.push(hold);
        }
        SlotTally::of(&slot, &holds, now).assert();
    }
    server.terminate();
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_server_survives_sigkill() {
    let dir = std::env::temp_dir().join(unique("sb_restart"));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("restart.db").display());
    kill_mid_load_and_check(&url).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_server_survives_sigkill() {
    let Some(admin) = gate::server_url("postgres_server_survives_sigkill") else {
        return;
    };
    let name = unique("sb_restart");
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|error| {
            panic!("{error}: these tests make a database each; DATABASE_URL's role needs CREATEDB")
        });
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    kill_mid_load_and_check(&format!("{base}/{name}")).await;
    let _ = sqlx::query(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await;
}
