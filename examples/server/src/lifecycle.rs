//! The whole server's life: the command line ([`main_from_env`]), starting ([`run`]: the
//! database, the engine, the event log, the listener), serving until a signal
//! ([`shutdown_signal`]) and stopping.

use crate::state::ServerStore;
use std::future::Future;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use slot_booking::{BookingEngine, StoreError};

use crate::{
    demo_slots, events, install_metrics, router_with_config, serve, CommandLineExit, Config,
    Database, Engine,
};

/// Installs the server's log output, as the `server` binaries do first: `tracing`'s `fmt`
/// subscriber on stdout, without targets, in colour only when stdout is a terminal. Panics if
/// the process already has a global subscriber.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::stdout().is_terminal())
        .init();
}

/// The server, configured from the command line and the environment
/// ([`Config::from_command_line`]): `--help` and `--version` print and exit 0; an argument it
/// does not take exits 2 with one line on stderr; an invalid setting (before anything is
/// opened) or a failure to start exits 1 with one line on stderr.
pub async fn main_from_env() -> ExitCode {
    let config = match Config::from_command_line(std::env::args_os()) {
        Ok(config) => config,
        Err(CommandLineExit::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(CommandLineExit::Usage(line)) => {
            eprintln!("{line}");
            return ExitCode::from(2);
        }
        Err(CommandLineExit::Invalid(error)) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match run(config, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the database, adds the demo slots (once, across processes), follows the database's
/// changes (from every process on it) for as long as it serves, and serves until `shutdown`
/// completes. Logs `following changes in the … database` once following, then
/// `serving on http://<address>` when it accepts connections. Failing to follow is a startup
/// error, like an unreachable database.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), String> {
    // Before the database is opened, so that the demo slots are counted too.
    install_metrics();
    let scheme = config.database_url.split(':').next().unwrap_or_default();
    let database = Database::open(&config.database_url)
        .await
        .map_err(|e| format!("cannot open the {scheme} database: {e}"))?
        .on_database_clock();
    if config.demo_slots {
        let added = database
            .seed(&demo_slots(chrono::Utc::now()), chrono::Utc::now())
            .await
            .map_err(|e| format!("cannot add demo slots: {e}"))?;
        if added > 0 {
            tracing::info!("added {added} demo slots");
        }
    }
    let engine: Engine = BookingEngine::builder(database.store())
        .hold_ttl(config.hold_ttl)
        .cache_period(config.cache_period)
        .build();
    // Other processes on this database commit too: their changes invalidate this engine's
    // listing soon after, instead of when its cache period ends. Kept for the server's life.
    let follower = database
        .follow_changes(engine.invalidator())
        .await
        .map_err(|e| format!("cannot follow changes in the {scheme} database: {e}"))?;
    tracing::info!(
        "following changes in the {scheme} database ({})",
        database.following()
    );
    // Every committed change is logged from the database's event log, expired holds are
    // swept so their `hold_expired` events come soon, and history older than the retention is
    // purged so the log stays bounded.
    let purging = config.history_retention.map(events::Purging::keeping);
    let events = database
        .log_events(purging, events::log)
        .map_err(|e| format!("cannot start the event log: {e}"))?;
    match purging {
        Some(purging) => tracing::info!(
            "purging history older than {} s every {} s",
            purging.keep.as_secs(),
            purging.every.as_secs()
        ),
        None => tracing::info!("keeping history forever (HISTORY_RETENTION_SECONDS=0)"),
    }
    let listener = serve::listen(&config.bind)
        .map_err(|e| format!("cannot listen on {}: {e}", config.bind))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        max_connections = config.max_connections,
        "serving on http://{address} ({scheme})"
    );
    let app = router_with_config(engine, &config);
    let left_open = serve(listener, app, &config, shutdown).await;
    follower.stop().await;
    events.stop().await;
    tracing::info!(left_open, "shut down");
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
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

/// Opens the store a `DATABASE_URL` names (`sqlite:`, `postgres:`/`postgresql:` or
/// `mysql:`/`mariadb:`) and applies its migrations. Time comes from the engine's clock (see
/// [`Database::on_database_clock`]).
pub async fn open_store(database_url: &str) -> Result<Arc<dyn ServerStore>, StoreError> {
    Ok(Database::open(database_url).await?.store())
}
