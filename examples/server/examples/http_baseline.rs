//! The least an axum server can do for `GET /slots/availability`: answer with fixed bytes.
//! `benches/http.sh` times the example server against it.
//!
//! ```sh
//! BASELINE_BODY=body.json BASELINE_HEADERS=headers.txt BIND=127.0.0.1:3001 \
//!     cargo run --release -p slot_booking_server --example http_baseline
//! ```
//!
//! `BASELINE_BODY` is the file whose bytes are the body; `BASELINE_HEADERS` (optional) holds
//! `name: value` lines, as `curl -D` writes them, to send with it (the status line, `date`,
//! `content-length`, `connection` and `transfer-encoding` are skipped: hyper writes those).
//! Same runtime as the server: tokio's multi-threaded default, HTTP/1.1.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::routing::get;
use axum::Router;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let body_path = std::env::var("BASELINE_BODY").map_err(|_| "set BASELINE_BODY to a file")?;
    let body = Bytes::from(std::fs::read(&body_path)?);
    let mut headers = HeaderMap::new();
    if let Ok(path) = std::env::var("BASELINE_HEADERS") {
        for line in std::fs::read_to_string(path)?.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue; // the status line, the blank line
            };
            let name = HeaderName::from_bytes(name.trim().as_bytes())?;
            if ["date", "content-length", "connection", "transfer-encoding"]
                .contains(&name.as_str())
            {
                continue;
            }
            headers.append(name, HeaderValue::from_str(value.trim())?);
        }
    }
    let app = Router::new().route(
        "/slots/availability",
        get(move || {
            let (headers, body) = (headers.clone(), body.clone());
            async move { (headers, body) }
        }),
    );
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3001".to_owned());
    let listener = tokio::net::TcpListener::bind(&bind).await?;
    println!("serving on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
