//! The server's configuration, read from the command line and the environment and checked as
//! a whole before anything is opened: a bad value stops the process with one line naming it.
//!
//! Every setting is in [`SETTINGS`]: its environment variable, its flag, its default and what
//! it does. The command line ([`command`], `server --help`) is built from it, and a test
//! checks that the README's settings table and the `server` example's agree with it.
//!
//! This module holds [`Config`] itself; the settings table and the command line are in
//! `config/settings.rs`, reading and checking the values in `config/load.rs`.

use std::fmt;
use std::time::Duration;

mod load;
mod settings;

pub use crate::owner::OwnerSecret;
pub use crate::secret::AdminToken;
pub use settings::{command, CommandLineExit, Setting, SETTINGS};

/// Every setting of the server, with the environment variable that sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `DATABASE_URL`: `sqlite:…` (default `sqlite://slot_booking.db`), `postgres://…` or
    /// `mysql://…` (MariaDB or MySQL; `mariadb://…` too).
    pub database_url: String,
    /// `BIND`: the address to listen on (default `127.0.0.1:3000`).
    pub bind: String,
    /// `PATH_PREFIX`: where the routes are mounted (default: the root). Empty, or `/` followed
    /// by segments of letters, digits, `-`, `_`, `.` and `~`, without a trailing `/`.
    pub path_prefix: String,
    /// `DEMO_SLOTS`: `0` skips the demo slots (default `1`).
    pub demo_slots: bool,
    /// `HOLD_TTL_SECONDS`: how long a hold lasts before it expires (default 300).
    pub hold_ttl: Duration,
    /// `CACHE_PERIOD_SECONDS`: how long an availability listing is served before it is read
    /// again (default 10; `0` reads the store on every request).
    pub cache_period: Duration,
    /// `HEADER_TIMEOUT_SECONDS`: a connection that has not sent a whole request head within
    /// this time, whether new or idle between requests, is closed (default 10).
    pub header_timeout: Duration,
    /// `BODY_TIMEOUT_SECONDS`: a request whose body has not arrived within this time gets 408
    /// (default 10).
    pub body_timeout: Duration,
    /// `MAX_CONNECTIONS`: connections served at once; more wait to be accepted (default 512,
    /// lowered to fit the process's open-file limit).
    pub max_connections: usize,
    /// `SHUTDOWN_GRACE_SECONDS`: after SIGTERM or SIGINT, how long requests in flight may take
    /// to finish before the remaining connections are closed (default 10).
    pub shutdown_grace: Duration,
    /// `ADMIN_TOKEN`: the bearer token of the administration routes, at least
    /// [`AdminToken::MIN_LEN`] visible ASCII characters (default: unset, and the routes are not
    /// mounted at all).
    pub admin_token: Option<AdminToken>,
    /// `AVAILABILITY_PAGE_LIMIT`: the most entries one `GET /slots/availability` response
    /// lists, and the largest `limit` it accepts (default 1000, at most
    /// [`MAX_AVAILABILITY_PAGE_LIMIT`]); more entries are in the next pages.
    pub availability_page_limit: u32,
    /// `REQUEST_LOG`: `0` turns off the one `INFO` line per request (default `1`). The line
    /// costs about a quarter of a cached availability request's CPU (`benches/http.sh`).
    pub request_log: bool,
    /// `HISTORY_RETENTION_SECONDS`: how long history is kept (default 7 days; `0`, `None`
    /// here, keeps it forever). Holds cancelled or expired longer ago than this are deleted,
    /// their idempotency keys with them (a retry with such a key places a new hold, and
    /// `GET /holds/{id}` is `hold_not_found`), and so are older events of the log every
    /// consumer has acknowledged, at least every hour ([`crate::events::Purging::keeping`]):
    /// the change stream replays at most this much, and a client resuming from further back
    /// is told to read the state again (see [`crate::live`]).
    pub history_retention: Option<Duration>,
    /// `OWNER_SECRET`: when set, an `Owner-Id` header must carry the owner and its signature
    /// under this secret ([`OwnerSecret`]), and anything else is refused; unset (the default),
    /// `Owner-Id` is taken as sent.
    pub owner_secret: Option<OwnerSecret>,
}

/// `HISTORY_RETENTION_SECONDS`' default: a week, well above any client's retry window for an
/// idempotency key (Stripe keeps keys a day) and any reasonable absence of a change stream's
/// client.
pub const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The largest `AVAILABILITY_PAGE_LIMIT` accepted.
pub const MAX_AVAILABILITY_PAGE_LIMIT: u32 = 100_000;

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: "sqlite://slot_booking.db".to_owned(),
            bind: "127.0.0.1:3000".to_owned(),
            path_prefix: String::new(),
            demo_slots: true,
            hold_ttl: Duration::from_secs(300),
            cache_period: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 512,
            shutdown_grace: Duration::from_secs(10),
            admin_token: None,
            availability_page_limit: 1000,
            request_log: true,
            history_retention: Some(DEFAULT_HISTORY_RETENTION),
            owner_secret: None,
        }
    }
}

/// A setting that cannot be used, with the variable that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The environment variable.
    pub variable: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.variable, self.problem)
    }
}

impl std::error::Error for ConfigError {}
