//! The slot_booking HTTP API, ready to run:
//!
//! ```sh
//! cargo run --example server
//! ```
//!
//! With no configuration it serves on 127.0.0.1:3000 from a SQLite file, `slot_booking.db`,
//! creating and migrating it and adding a few demo slots when it has none coming up.
//!
//! - `DATABASE_URL=postgres://…` uses PostgreSQL instead (default `sqlite://slot_booking.db`).
//! - `BIND=host:port` changes the address.
//! - `PATH_PREFIX=/api` serves the routes under a prefix.
//! - `DEMO_SLOTS=0` skips the demo data.
//!
//! The routes and their errors live in the `slot_booking_server` crate (examples/server).

use std::env;
use std::io::IsTerminal;
use std::process::ExitCode;

use chrono::{Duration, DurationRound, Utc};
use slot_booking::{AvailabilityQuery, BookingEngine, NewSlot};
use slot_booking_server::Engine;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    // 1. Configuration, from the environment.
    let database_url =
        env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite://slot_booking.db".to_owned());
    let bind = env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let prefix = env::var("PATH_PREFIX").unwrap_or_default();
    let demo_slots = env::var("DEMO_SLOTS").map_or(true, |v| v != "0");

    // 2. The store (migrated) and the engine on top of it.
    let scheme = database_url.split(':').next().unwrap_or_default();
    let store = slot_booking_server::open_store(&database_url)
        .await
        .map_err(|e| format!("cannot open the {scheme} database: {e}"))?;
    let engine: Engine = BookingEngine::new(store);
    if demo_slots {
        add_demo_slots(&engine).await?;
    }

    // 3. Serve until SIGINT or SIGTERM, letting requests in flight finish.
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!("serving on http://{address} ({scheme})");
    let app = slot_booking_server::router_with_prefix(engine, &prefix);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| format!("server stopped: {e}"))?;
    tracing::info!("shut down");
    Ok(())
}

/// Eight one-hour slots from tomorrow 09:00 UTC, capacities 1 to 20, when none are coming up.
async fn add_demo_slots(engine: &Engine) -> Result<(), String> {
    let upcoming = engine
        .availability(AvailabilityQuery::all())
        .await
        .map_err(|e| format!("cannot read availability: {e}"))?;
    if !upcoming.is_empty() {
        return Ok(());
    }
    let midnight = Utc::now()
        .duration_trunc(Duration::days(1))
        .map_err(|e| e.to_string())?;
    let first = midnight + Duration::days(1) + Duration::hours(9);
    for (i, capacity) in [1, 2, 3, 5, 8, 10, 15, 20].into_iter().enumerate() {
        let starts_at = first + Duration::hours(i as i64);
        engine
            .create_slot(NewSlot::new(
                starts_at,
                starts_at + Duration::hours(1),
                capacity,
            ))
            .await
            .map_err(|e| format!("cannot add demo slots: {e}"))?;
    }
    tracing::info!("added 8 demo slots");
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {},
        _ = terminate => {},
    }
}
