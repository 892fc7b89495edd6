//! The slot_booking HTTP API, ready to run:
//!
//! ```sh
//! cargo run --example server
//! ```
//!
//! With no configuration it serves on 127.0.0.1:3000 from a SQLite file, `slot_booking.db`,
//! creating and migrating it and adding eight demo slots when none are coming up. Every
//! setting is an environment variable or a flag (`cargo run --example server -- --help` lists
//! them; the flag wins), checked before anything is opened:
//!
//! | variable | flag | default | |
//! |---|---|---|---|
//! | `DATABASE_URL` | `--database-url` | `sqlite://slot_booking.db` | `postgres://…` for PostgreSQL (add `?sslmode=require` for TLS), `mysql://…` or `mariadb://…` for MariaDB/MySQL (add `?ssl-mode=required`) |
//! | `BIND` | `--bind` | `127.0.0.1:3000` | address to listen on |
//! | `PATH_PREFIX` | `--path-prefix` | none | mount the routes under e.g. `/api` |
//! | `DEMO_SLOTS` | `--demo-slots` | `1` | `0` skips the demo slots |
//! | `HOLD_TTL_SECONDS` | `--hold-ttl-seconds` | `300` | how long a hold lasts |
//! | `CACHE_PERIOD_SECONDS` | `--cache-period-seconds` | `10` | how long an availability listing is reused |
//! | `HEADER_TIMEOUT_SECONDS` | `--header-timeout-seconds` | `10` | a request head must arrive within this |
//! | `BODY_TIMEOUT_SECONDS` | `--body-timeout-seconds` | `10` | a request body must arrive within this (else 408) |
//! | `MAX_CONNECTIONS` | `--max-connections` | `512` | connections served at once (fitted to the open-file limit); at the limit the longest-idle keep-alive connection makes room for a newcomer |
//! | `SHUTDOWN_GRACE_SECONDS` | `--shutdown-grace-seconds` | `10` | after SIGTERM/SIGINT, time for requests in flight |
//! | `AVAILABILITY_PAGE_LIMIT` | `--availability-page-limit` | `1000` | most availability entries in one response (1–100,000); more are paged (`Link: rel="next"`) |
//! | `REQUEST_LOG` | `--request-log` | `1` | `0` turns off the one `INFO` line per request |
//! | `HISTORY_RETENTION_SECONDS` | `--history-retention-seconds` | `604800` | ended holds and delivered events older than this are deleted, so the event log stays bounded (`0`: kept forever) |
//! | `ADMIN_TOKEN` | `--admin-token` | none | enables the `/admin/...` routes, each needing `Authorization: Bearer <token>` (16+ visible ASCII characters) |
//! | `OWNER_SECRET` | `--owner-secret` | none | `Owner-Id` must be `<owner>.<hex HMAC-SHA256 of the owner>` signed with it (32+ visible ASCII characters) |
//!
//! `Owner-Id` is trusted as sent unless `OWNER_SECRET` is set: put the server behind the
//! application's authentication (which sets `Owner-Id` from the authenticated user and drops
//! any value a client sent), use unguessable owner ids, or set `OWNER_SECRET` and have the
//! application sign them ([`slot_booking_server::owner`]).
//!
//! Open <http://127.0.0.1:3000/> in a browser for a page to try it: the coming slots with their
//! free units, kept current, and holds to place, confirm, renew and cancel.
//!
//! The server itself lives in the `slot_booking_server` crate (examples/server).

use std::io::IsTerminal;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    slot_booking_server::main_from_env().await
}
