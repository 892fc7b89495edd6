//! The slot_booking HTTP API, ready to run:
//!
//! ```sh
//! cargo run --example server
//! ```
//!
//! With no configuration it serves on 127.0.0.1:3000 from a SQLite file, `slot_booking.db`,
//! creating and migrating it and adding eight demo slots when none are coming up. Every
//! setting is an environment variable, checked before anything is opened:
//!
//! | variable | default | |
//! |---|---|---|
//! | `DATABASE_URL` | `sqlite://slot_booking.db` | `postgres://…` for PostgreSQL (add `?sslmode=require` for TLS) |
//! | `BIND` | `127.0.0.1:3000` | address to listen on |
//! | `PATH_PREFIX` | none | mount the routes under e.g. `/api` |
//! | `DEMO_SLOTS` | `1` | `0` skips the demo slots |
//! | `HOLD_TTL_SECONDS` | `300` | how long a hold lasts |
//! | `CACHE_PERIOD_SECONDS` | `10` | how long an availability listing is reused |
//! | `HEADER_TIMEOUT_SECONDS` | `10` | a request head must arrive within this |
//! | `BODY_TIMEOUT_SECONDS` | `10` | a request body must arrive within this (else 408) |
//! | `MAX_CONNECTIONS` | `512` | connections served at once (fitted to the open-file limit) |
//! | `SHUTDOWN_GRACE_SECONDS` | `10` | after SIGTERM/SIGINT, time for requests in flight |
//! | `AVAILABILITY_PAGE_LIMIT` | `1000` | most availability entries in one response (1–100,000); more are paged (`Link: rel="next"`) |
//! | `REQUEST_LOG` | `1` | `0` turns off the one `INFO` line per request |
//! | `ADMIN_TOKEN` | none | enables the `/admin/...` routes, each needing `Authorization: Bearer <token>` (16+ visible ASCII characters) |
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
