//! A real server on a real port, over SQLite or PostgreSQL, with a manual clock.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use chrono::TimeZone;
use slot_booking::{BookingEngine, ManualClock, NewSlot, SlotId, Store, Timestamp};
use slot_booking_server::Engine;
use sqlx::Connection;

pub fn epoch() -> Timestamp {
    chrono::Utc
        .with_ymd_and_hms(2030, 6, 1, 8, 0, 0)
        .single()
        .unwrap()
}

pub struct TestServer {
    pub base: String,
    pub engine: Engine,
    pub clock: ManualClock,
    pub http: reqwest::Client,
    pub store: Arc<dyn Store>,
    _cleanup: Option<Cleanup>,
}

enum Cleanup {
    SqliteDir(std::path::PathBuf),
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        match self {
            Cleanup::SqliteDir(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh SQLite file in a temp dir of its own.
pub async fn sqlite_url() -> (String, Option<std::path::PathBuf>) {
    let dir = std::env::temp_dir().join(unique("sb_e2e"));
    std::fs::create_dir_all(&dir).unwrap();
    (
        format!("sqlite://{}", dir.join("test.db").display()),
        Some(dir),
    )
}

/// A fresh PostgreSQL database on the server `DATABASE_URL` names, or `None` (loudly) when it
/// is not set outside CI.
pub async fn postgres_url() -> Option<String> {
    let Ok(admin) = std::env::var("DATABASE_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the PostgreSQL tests: set DATABASE_URL"
        );
        eprintln!("SKIPPED: DATABASE_URL is not set; PostgreSQL e2e test not run");
        return None;
    };
    let name = unique("sb_e2e");
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    Some(format!("{base}/{name}"))
}

impl TestServer {
    pub async fn start(database_url: &str, cleanup_dir: Option<std::path::PathBuf>) -> Self {
        let store = slot_booking_server::open_store(database_url).await.unwrap();
        Self::with_store(store, cleanup_dir).await
    }

    pub async fn with_store(
        store: Arc<dyn Store>,
        cleanup_dir: Option<std::path::PathBuf>,
    ) -> Self {
        let clock = ManualClock::new(epoch());
        let engine: Engine = BookingEngine::builder(Arc::clone(&store))
            .clock(clock.clone())
            .build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = slot_booking_server::router(engine.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        TestServer {
            base,
            engine,
            clock,
            http: reqwest::Client::new(),
            store,
            _cleanup: cleanup_dir.map(Cleanup::SqliteDir),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn slot(&self, capacity: i32, starts_in: chrono::Duration) -> SlotId {
        let starts_at = epoch() + starts_in;
        self.engine
            .create_slot(NewSlot::new(
                starts_at,
                starts_at + chrono::Duration::hours(1),
                capacity,
            ))
            .await
            .unwrap()
            .slot_id
    }

    pub async fn hold(&self, slot: SlotId, key: &str) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/slots/{slot}/hold")))
            .header("Idempotency-Key", key)
            .send()
            .await
            .unwrap()
    }

    pub async fn remaining(&self, slot: SlotId) -> i32 {
        self.store.get_slot(slot).await.unwrap().unwrap().remaining
    }
}

/// Status, problem code (if any) and JSON body of a response.
pub async fn read(response: reqwest::Response) -> (u16, Option<String>, serde_json::Value) {
    let status = response.status().as_u16();
    let is_problem = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v == "application/problem+json");
    let text = response.text().await.unwrap();
    let body: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    let code = is_problem.then(|| body["code"].as_str().unwrap_or_default().to_owned());
    if is_problem {
        assert_eq!(body["type"], "about:blank", "{text}");
        assert_eq!(body["status"], status, "{text}");
        assert!(
            body["title"].is_string() && body["detail"].is_string(),
            "{text}"
        );
    }
    (status, code, body)
}

/// Drops a database made by [`postgres_url`] (after a passing test; a failing one leaves it
/// behind for a look).
pub async fn drop_postgres(url: &str) {
    let Ok(admin) = std::env::var("DATABASE_URL") else {
        return;
    };
    let Some((_, name)) = url.rsplit_once('/') else {
        return;
    };
    if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await;
    }
}
