//! Whether the PostgreSQL tests run, and on which server. Shared by every test binary with
//! PostgreSQL tests (`backends/postgres/tests`, `examples/server/tests`, `tests/restart.rs`
//! include this file by path), so they all decide alike.
//!
//! The server is `DATABASE_URL`'s or, when that is unset, PostgreSQL's default local address
//! ([`DEFAULT_URL`]). The first test of a binary that asks connects to it once (and runs
//! `SELECT 1`); every later test of that binary gets the same answer.
//!
//! When nothing answers there (or the server refuses the connection):
//!
//! * with `CI` set, every PostgreSQL test fails, naming the reason: CI never skips them;
//! * otherwise each test prints a `SKIPPED` line to stderr and returns early. Stable Rust
//!   cannot mark a test ignored once it runs, so libtest counts it as passed; the binary
//!   therefore prints, when it exits (an `atexit` hook, after libtest's `test result:` line),
//!   how many of its tests were skipped and why, so that summary is not read as a pass of them.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Mutex, Once, OnceLock, PoisonError};
use std::time::Duration;

use sqlx::Connection;

/// Where the tests look when `DATABASE_URL` is unset: PostgreSQL's default local address and
/// its default superuser and database.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// How long the one connection attempt may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's URL, or why there is none; decided once per test binary.
static SERVER: OnceLock<Result<String, String>> = OnceLock::new();

/// The tests skipped so far (their libtest names where known).
static SKIPPED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

static SUMMARY_HOOK: Once = Once::new();

/// The URL of the server the PostgreSQL tests use, or `None` after printing that `test` is
/// SKIPPED (and counting it for the summary at exit). Panics instead when `CI` is set.
///
/// Blocks while the first call of the binary connects (on a thread and runtime of its own, so
/// it may be called from any async test).
pub fn server_url(test: &str) -> Option<String> {
    match SERVER.get_or_init(probe) {
        Ok(url) => Some(url.clone()),
        Err(reason) => {
            if std::env::var_os("CI").is_some() {
                panic!("{test}: {reason}. CI is set: PostgreSQL tests must run, not be skipped");
            }
            skip(test, reason);
            None
        }
    }
}

/// The server's URL if a test has already been given it.
pub fn known_url() -> Option<String> {
    SERVER
        .get()
        .and_then(|server| server.as_ref().ok().cloned())
}

/// `url` with its password, if any, replaced by `***`.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

fn probe() -> Result<String, String> {
    let (url, from) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, "DATABASE_URL"),
        _ => (
            DEFAULT_URL.to_owned(),
            "the default local address; DATABASE_URL is not set",
        ),
    };
    let target = url.clone();
    let attempt = std::thread::spawn(move || -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| format!("cannot build a runtime: {error}"))?;
        runtime.block_on(async move {
            let connect = async {
                let mut connection = sqlx::PgConnection::connect(&target).await?;
                sqlx::query("SELECT 1").execute(&mut connection).await?;
                connection.close().await
            };
            match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
            }
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the connection attempt panicked".to_owned()));
    attempt.map(|()| url.clone()).map_err(|error| {
        format!(
            "no PostgreSQL server could be used at {} ({from}): {error}",
            redacted(&url)
        )
    })
}

fn skip(test: &str, reason: &str) {
    // libtest runs each test on a thread named after it; a helper thread gets `test` instead.
    let name = std::thread::current()
        .name()
        .filter(|name| *name != "main" && !name.starts_with("tokio-"))
        .map_or_else(|| test.to_owned(), str::to_owned);
    SKIPPED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.clone());
    // Straight to the process's stderr: `eprintln!` would be captured by the harness and never
    // shown for a test that returns.
    let mut stderr = std::io::stderr().lock();
    SUMMARY_HOOK.call_once(|| {
        shutdown_hooks::add_shutdown_hook(summary);
        let _ = writeln!(stderr, "*** PostgreSQL tests are SKIPPED: {reason} ***");
    });
    let _ = writeln!(
        stderr,
        "*** SKIPPED {name}: no PostgreSQL server; this test did NOT run ***"
    );
}

/// Runs when the test binary exits, after libtest's own summary.
extern "C" fn summary() {
    let skipped = SKIPPED.lock().unwrap_or_else(PoisonError::into_inner).len();
    let reason = match SERVER.get() {
        Some(Err(reason)) => reason.as_str(),
        _ => "no server",
    };
    let binary = std::env::args()
        .next()
        .and_then(|path| {
            std::path::Path::new(&path)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let _ = writeln!(
        std::io::stderr(),
        "\n*** {binary}: {skipped} PostgreSQL test(s) were SKIPPED: counted as passed above, \
         they did NOT run. {reason}. Start PostgreSQL there or set DATABASE_URL (README.md, \
         \"Set-up commands\"); with CI set they fail instead. ***\n"
    );
}
