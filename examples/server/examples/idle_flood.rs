//! How long a new client waits for its first response while many idle keep-alive connections
//! are open: the measurement of issue 23 part 2 (`examples/server/idle_flood.sh` runs it
//! against a release server on SQLite and on PostgreSQL).
//!
//! ```sh
//! TARGET=127.0.0.1:3000 IDLE=2000 NEWCOMERS=50 \
//!     cargo run --release -p slot_booking_server --example idle_flood
//! ```
//!
//! 1. Opens `IDLE` connections at once; each sends one keep-alive `GET PATH`, reads the
//!    response and then stays silent. With `REOPEN=1` a connection the server closes is opened
//!    again at once and does the same (a client that keeps its connections open by
//!    reconnecting); by default it stays closed.
//! 2. Once no connection has been answered for `SETTLE_MS` (default 1000), or after
//!    `WARMUP_SECONDS` (default 10) when answers keep coming (reopening), `NEWCOMERS` new
//!    clients, one after another, each connect, send `GET PATH` with `Connection: close` and
//!    read the whole response: the time from connecting to the end of the response is the
//!    newcomer's first-response time (a newcomer not answered within a minute counts as 60 s).
//! 3. Prints each time, then the count, p50, p90, p99 (nearest rank) and maximum, and how many
//!    of the idle connections had been answered and closed by the server.
//!
//! Needs file descriptors for `IDLE` + a few connections: raise `ulimit -n` first.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A newcomer not answered within this counts as this long.
const GIVE_UP: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Counts {
    answered: AtomicUsize,
    closed: AtomicUsize,
    failed: AtomicUsize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target = setting("TARGET", "127.0.0.1:3000".to_owned())?;
    let idle: usize = setting("IDLE", 2000)?;
    let newcomers: usize = setting("NEWCOMERS", 50)?;
    let reopen = setting("REOPEN", 0u8)? == 1;
    let settle = Duration::from_millis(setting("SETTLE_MS", 1000)?);
    let warmup = Duration::from_secs(setting("WARMUP_SECONDS", 10)?);
    let path = setting("PATH_AND_QUERY", "/slots/availability".to_owned())?;
    let keep_alive = format!("GET {path} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes();
    let close =
        format!("GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n").into_bytes();

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..idle {
        let (target, request) = (target.clone(), keep_alive.clone());
        let (counts, stop) = (Arc::clone(&counts), Arc::clone(&stop));
        tokio::spawn(async move {
            loop {
                match one_idle_connection(&target, &request, &counts).await {
                    Ok(()) => counts.closed.fetch_add(1, Ordering::Relaxed),
                    Err(_) => counts.failed.fetch_add(1, Ordering::Relaxed),
                };
                if !reopen || stop.load(Ordering::Relaxed) {
                    return;
                }
            }
        });
    }
    // Settled: no new answer for `settle`, or the warm-up is over.
    let started = Instant::now();
    let mut last = usize::MAX;
    loop {
        tokio::time::sleep(settle).await;
        let now = counts.answered.load(Ordering::Relaxed);
        if now == last || started.elapsed() >= warmup {
            break;
        }
        last = now;
    }
    println!(
        "idle connections: {idle} opened; {} exchanges answered, {} connections closed by the server, {} failed; \
         settled after {:.1} s{}",
        counts.answered.load(Ordering::Relaxed),
        counts.closed.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        if reopen { " (reopening)" } else { "" }
    );

    let mut times = Vec::with_capacity(newcomers);
    for i in 0..newcomers {
        let began = Instant::now();
        let answer = tokio::time::timeout(GIVE_UP, newcomer(&target, &close)).await;
        let took = began.elapsed();
        match answer {
            Ok(Ok(status)) if status.starts_with("HTTP/1.1 200") => {}
            Ok(Ok(status)) => println!("newcomer {i}: answered {status:?}"),
            Ok(Err(error)) => println!("newcomer {i}: {error}"),
            Err(_) => println!("newcomer {i}: no answer within {GIVE_UP:?}"),
        }
        println!("newcomer {i}: {:.1} ms", took.as_secs_f64() * 1000.0);
        times.push(took);
    }
    stop.store(true, Ordering::Relaxed);
    times.sort();
    let rank = |p: f64| times[((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    if !times.is_empty() {
        println!(
            "first response of {} newcomers: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            times.len(),
            ms(rank(0.50)),
            ms(rank(0.90)),
            ms(rank(0.99)),
            ms(times[times.len() - 1]),
        );
    }
    println!(
        "idle connections at the end: {} exchanges answered, {} connections closed by the server, {} failed",
        counts.answered.load(Ordering::Relaxed),
        counts.closed.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    Ok(())
}

fn setting<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match std::env::var(name) {
        Ok(raw) => raw
            .parse()
            .map_err(|_| format!("{name}={raw:?} is not valid")),
        Err(_) => Ok(default),
    }
}

/// One keep-alive exchange, then silence until the server closes the connection.
async fn one_idle_connection(target: &str, request: &[u8], counts: &Counts) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(target).await?;
    stream.write_all(request).await?;
    read_response(&mut stream).await?;
    counts.answered.fetch_add(1, Ordering::Relaxed);
    let mut buffer = [0u8; 1024];
    loop {
        if stream.read(&mut buffer).await? == 0 {
            return Ok(());
        }
    }
}

/// A newcomer's exchange: the status line of the whole response.
async fn newcomer(target: &str, request: &[u8]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(target).await?;
    stream.write_all(request).await?;
    read_response(&mut stream).await
}

/// Reads one response with a `Content-Length` body; returns its status line.
async fn read_response(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 8192];
    let broken = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let (head_end, length) = loop {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Err(broken("closed before a whole response"));
        }
        received.extend_from_slice(&buffer[..n]);
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .ok_or_else(|| broken("a response without content-length"))?;
            break (end + 4, length);
        }
    };
    while received.len() < head_end + length {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Err(broken("closed in the middle of a body"));
        }
        received.extend_from_slice(&buffer[..n]);
    }
    let status = String::from_utf8_lossy(&received[..head_end]);
    Ok(status.lines().next().unwrap_or_default().to_owned())
}
