//! The slot_booking example server as a binary of this crate (the root package's
//! `cargo run --example server` runs the same): configured from flags and the environment
//! (`server --help`), see [`slot_booking_server::Config`].

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    slot_booking_server::init_logging();
    slot_booking_server::main_from_env().await
}
