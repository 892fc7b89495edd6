//! The slot_booking example server as a binary of this crate (the root package's
//! `cargo run --example server` runs the same): configured from flags and the environment
//! (`server --help`), see [`slot_booking_server::Config`].

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
