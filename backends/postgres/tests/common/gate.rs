//! Whether the tests of a database server run, and on which server. Shared by every test binary
//! with PostgreSQL tests (`backends/postgres/tests`, `examples/server/tests`, `tests/restart.rs`
//! include this file by path), so they all decide alike; the example server's tests gate their
//! MariaDB/MySQL tests with a [`Gate`] of their own the same way.
//!
//! The server is the one a variable names (PostgreSQL: `DATABASE_URL`) or, when that is
//! unset, a default local address ([`DEFAULT_URL`] for PostgreSQL). The first test of a binary
//! that asks connects to it once (and pings it); every later test of that binary gets the same
//! answer.
//!
//! When nothing answers there (or the server refuses the connection):
//!
//! * with `CI` set, every such test fails, naming the reason: CI never skips them;
//! * otherwise each test prints a `SKIPPED` line to stderr and returns early. Stable Rust
//!   cannot mark a test ignored once it runs, so libtest counts it as passed; the binary
//!   therefore prints, when it exits (an `atexit` hook, after libtest's `test result:` line),
//!   how many of its tests were skipped and why, so that summary is not read as a pass of them.

use std::collections::BTreeSet;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Mutex, Once, OnceLock, PoisonError};
use std::time::Duration;

use sqlx::Connection;

/// Where the PostgreSQL tests look when `DATABASE_URL` is unset: PostgreSQL's default local
/// address and its default superuser and database.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The PostgreSQL tests' gate.
pub static POSTGRES: Gate = Gate::new(
    "PostgreSQL",
    "DATABASE_URL",
    DEFAULT_URL,
    probe::<sqlx::PgConnection>,
);

/// How long the one connection attempt may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection attempt: connects to the URL, pings and closes.
pub type Probe = fn(String) -> Pin<Box<dyn Future<Output = Result<(), sqlx::Error>>>>;

/// Connects to `url` with sqlx's connection `C`, pings and closes: a [`Probe`].
pub fn probe<C: Connection>(url: String) -> Pin<Box<dyn Future<Output = Result<(), sqlx::Error>>>> {
    Box::pin(async move {
        let mut connection = C::connect(&url).await?;
        connection.ping().await?;
        connection.close().await
    })
}

/// Whether one kind of database server's tests run, and where; decided once per test binary.
pub struct Gate {
    /// The server's kind as messages name it, e.g. `PostgreSQL`.
    name: &'static str,
    /// The environment variable that names the server, e.g. `DATABASE_URL`.
    variable: &'static str,
    /// Where the tests look when the variable is unset.
    default_url: &'static str,
    probe: Probe,
    /// The server's URL, or why there is none.
    server: OnceLock<Result<String, String>>,
    /// The tests skipped so far (their libtest names where known).
    skipped: Mutex<BTreeSet<String>>,
    /// Announces the first skip.
    first_skip: Once,
}

/// The gates that skipped a test, for the summary at exit.
static SKIPPING: Mutex<Vec<&'static Gate>> = Mutex::new(Vec::new());

static SUMMARY_HOOK: Once = Once::new();

impl Gate {
    /// The gate of the tests of `name` servers, on the server `variable` names or else at
    /// `default_url`, asked whether it answers with `probe`.
    pub const fn new(
        name: &'static str,
        variable: &'static str,
        default_url: &'static str,
        probe: Probe,
    ) -> Gate {
        Gate {
            name,
            variable,
            default_url,
            probe,
            server: OnceLock::new(),
            skipped: Mutex::new(BTreeSet::new()),
            first_skip: Once::new(),
        }
    }

    /// The URL of the server the tests use, or `None` after printing that `test` is SKIPPED
    /// (and counting it for the summary at exit). Panics instead when `CI` is set.
    ///
    /// Blocks while the first call of the binary connects (on a thread and runtime of its
    /// own, so it may be called from any async test).
    pub fn server_url(&'static self, test: &str) -> Option<String> {
        match self.server.get_or_init(|| self.probe_server()) {
            Ok(url) => Some(url.clone()),
            Err(reason) => {
                if std::env::var_os("CI").is_some() {
                    panic!(
                        "{test}: {reason}. CI is set: {} tests must run, not be skipped",
                        self.name
                    );
                }
                self.skip(test, reason);
                None
            }
        }
    }

    /// The server's URL if a test has already been given it.
    pub fn known_url(&self) -> Option<String> {
        self.server
            .get()
            .and_then(|server| server.as_ref().ok().cloned())
    }

    fn probe_server(&self) -> Result<String, String> {
        let (url, from) = match std::env::var(self.variable) {
            Ok(url) if !url.is_empty() => (url, self.variable.to_owned()),
            _ => (
                self.default_url.to_owned(),
                format!("the default local address; {} is not set", self.variable),
            ),
        };
        let (target, probe) = (url.clone(), self.probe);
        let attempt = std::thread::spawn(move || -> Result<(), String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| format!("cannot build a runtime: {error}"))?;
            runtime.block_on(async move {
                match tokio::time::timeout(PROBE_TIMEOUT, probe(target)).await {
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
                "no {} server could be used at {} ({from}): {error}",
                self.name,
                redacted(&url)
            )
        })
    }

    fn skip(&'static self, test: &str, reason: &str) {
        // libtest runs each test on a thread named after it; a helper thread gets `test`
        // instead.
        let name = std::thread::current()
            .name()
            .filter(|name| *name != "main" && !name.starts_with("tokio-"))
            .map_or_else(|| test.to_owned(), str::to_owned);
        self.skipped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone());
        // Straight to the process's stderr: `eprintln!` would be captured by the harness and
        // never shown for a test that returns.
        let mut stderr = std::io::stderr().lock();
        self.first_skip.call_once(|| {
            SKIPPING
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self);
            SUMMARY_HOOK.call_once(|| {
                shutdown_hooks::add_shutdown_hook(summary);
            });
            let _ = writeln!(stderr, "*** {} tests are SKIPPED: {reason} ***", self.name);
        });
        let _ = writeln!(
            stderr,
            "*** SKIPPED {name}: no {} server; this test did NOT run ***",
            self.name
        );
    }
}

/// The PostgreSQL server's URL ([`POSTGRES`]), or `None` after printing that `test` is
/// SKIPPED. Panics instead when `CI` is set.
pub fn server_url(test: &str) -> Option<String> {
    POSTGRES.server_url(test)
}

/// The PostgreSQL server's URL if a test has already been given it.
pub fn known_url() -> Option<String> {
    POSTGRES.known_url()
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

/// Runs when the test binary exits, after libtest's own summary: a line per gate that skipped.
extern "C" fn summary() {
    let binary = std::env::args()
        .next()
        .and_then(|path| {
            std::path::Path::new(&path)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let gates = SKIPPING.lock().unwrap_or_else(PoisonError::into_inner);
    for gate in gates.iter() {
        let skipped = gate
            .skipped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        let reason = match gate.server.get() {
            Some(Err(reason)) => reason.as_str(),
            _ => "no server",
        };
        let _ = writeln!(
            std::io::stderr(),
            "\n*** {binary}: {skipped} {name} test(s) were SKIPPED: counted as passed above, \
             they did NOT run. {reason}. Start {name} there or set {variable} (README.md, \
             \"Set-up commands\"); with CI set they fail instead. ***\n",
            name = gate.name,
            variable = gate.variable,
        );
    }
}
