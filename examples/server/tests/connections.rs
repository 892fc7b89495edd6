//! The server's connection bounds, over real sockets: stalled clients are cut off at the header
//! timeout and cannot starve others, the connection limit holds without failing, at the limit an
//! idle keep-alive connection makes room for a newcomer while a busy one never does, bodies have
//! a timeout, malformed bodies are 400 (not 413), and shutdown ends within its grace period.

use slot_booking_server::ServerStore;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slot_booking::{BookingEngine, MemoryStore};
use slot_booking_server::{router_with_config, serve, Config, Engine};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server on a free port with `config`, stopped by sending on `stop`.
struct Running {
    address: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<usize>,
}

async fn start(config: Config) -> Running {
    let store: Arc<dyn ServerStore> = Arc::new(MemoryStore::new());
    let engine: Engine = BookingEngine::new(store);
    start_app(router_with_config(engine, &config), config).await
}

/// Serves `app` (any router) with `config`'s connection bounds.
async fn start_app(app: axum::Router, config: Config) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        serve(listener, app, &config, async {
            let _ = stopped.await;
        })
        .await
    });
    Running {
        address,
        stop: Some(stop),
        served,
    }
}

fn config(header_timeout_secs: u64, max_connections: usize) -> Config {
    Config {
        header_timeout: Duration::from_secs(header_timeout_secs),
        body_timeout: Duration::from_secs(1),
        max_connections,
        shutdown_grace: Duration::from_secs(1),
        ..Config::default()
    }
}

/// A connection that sent half a request head and then nothing.
async fn stalled(address: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /slots/availability HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    stream
}

/// Sends `request` whole and returns everything the server answers until it closes.
async fn exchange(address: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Waits until the server closes `stream` (end of file or reset), reading anything it sends.
async fn closed_by_server(mut stream: TcpStream) {
    let mut buffer = [0u8; 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

const NORMAL_REQUEST: &[u8] =
    b"GET /slots/availability HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_do_not_starve_a_normal_request_and_are_cut_off() {
    // A limit above the stalled clients: the normal request gets in at once.
    let server = start(config(5, 512)).await;
    let mut stalled_clients = Vec::new();
    for _ in 0..300 {
        stalled_clients.push(stalled(server.address).await);
    }
    let started = Instant::now();
    let answer = exchange(server.address, NORMAL_REQUEST).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Answered while every stalled client still holds its connection (before the timeout).
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Then each stalled connection is closed by the header timeout.
    let all_closed = futures_join_all(stalled_clients.into_iter().map(closed_by_server));
    tokio::time::timeout(Duration::from_secs(30), all_closed)
        .await
        .expect("stalled connections were not closed by the header timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_limit_new_clients_wait_and_are_served() {
    // Every permit taken by stalled clients: the normal request waits in the backlog until
    // the header timeout frees one, then is answered (not refused, not failed).
    let server = start(config(1, 20)).await;
    let mut stalled_clients = Vec::new();
    for _ in 0..20 {
        stalled_clients.push(stalled(server.address).await);
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        exchange(server.address, NORMAL_REQUEST),
    )
    .await
    .expect("a client waiting at the connection limit was never served");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_at_the_header_timeout() {
    let server = start(config(1, 16)).await;
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    stream
        .write_all(b"GET /slots/availability HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    tokio::time::timeout(Duration::from_secs(30), closed_by_server(stream))
        .await
        .expect("an idle connection stayed open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_gets_408_and_a_malformed_one_400() {
    let server = start(config(10, 16)).await;
    // Announces 10 bytes, sends 2, then waits.
    let mut slow = TcpStream::connect(server.address).await.unwrap();
    slow.write_all(b"POST /slots/1/hold HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nContent-Length: 10\r\n\r\nab")
        .await
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(30), slow.read(&mut answer))
        .await
        .expect("no answer to a stalled body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");

    let malformed = exchange(
        server.address,
        b"POST /slots/1/hold HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nnot a chunk\r\n",
    )
    .await;
    assert!(malformed.starts_with("HTTP/1.1 400"), "{malformed}");
    assert!(
        malformed.contains("\"code\":\"invalid_body\""),
        "{malformed}"
    );

    let mut oversized = b"POST /slots/1/hold HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        .to_vec();
    for _ in 0..20 {
        oversized.extend_from_slice(b"400\r\n");
        oversized.extend_from_slice(&[b'a'; 1024]);
        oversized.extend_from_slice(b"\r\n");
    }
    oversized.extend_from_slice(b"0\r\n\r\n");
    let oversized = exchange(server.address, &oversized).await;
    assert!(oversized.starts_with("HTTP/1.1 413"), "{oversized}");
    assert!(
        oversized.contains("\"code\":\"payload_too_large\""),
        "{oversized}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_within_the_grace_period_despite_a_stalled_client() {
    // A header timeout far beyond the grace period: only the grace bound can end this.
    let mut server = start(config(600, 16)).await;
    let _stalled = stalled(server.address).await;
    // The server has the connection once it answers another one.
    let answer = exchange(server.address, NORMAL_REQUEST).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop.take().unwrap().send(()).unwrap();
    let left_open = tokio::time::timeout(Duration::from_secs(30), &mut server.served)
        .await
        .expect("serve did not return after the grace period")
        .unwrap();
    // It returned because the grace period ran out, with the stalled connection still open.
    assert_eq!(left_open, 1);
    // And new connections are refused.
    assert!(TcpStream::connect(server.address).await.is_err());
}

/// Reads from `stream` until what has arrived ends with `end`, and returns it all. Panics
/// (rather than hangs) when the server closes the connection first or nothing comes for a
/// minute: a guard against a hang, not a timing assertion.
async fn read_until(stream: &mut TcpStream, end: &str) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    while !received.ends_with(end.as_bytes()) {
        let n = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut buffer))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "waited a minute for {end:?}; got {:?}",
                    String::from_utf8_lossy(&received)
                )
            })
            .unwrap_or(0);
        assert!(
            n > 0,
            "closed before {end:?}; got {:?}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

/// A connection that has had one keep-alive exchange answered in full and is now idle.
async fn idle_after(address: std::net::SocketAddr, request: &[u8], body_end: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let answer = read_until(&mut stream, body_end).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stream
}

/// Waits (a minute at most) until the server closes `stream`: a guard against a hang.
async fn closed_within_a_minute(stream: TcpStream, what: &str) {
    tokio::time::timeout(Duration::from_secs(60), closed_by_server(stream))
        .await
        .unwrap_or_else(|_| panic!("{what} was not closed"));
}

const KEEP_ALIVE_REQUEST: &[u8] = b"GET /slots/availability HTTP/1.1\r\nHost: x\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_an_idle_keep_alive_connection_makes_room_and_a_stalled_one_does_not() {
    // A header timeout no test run reaches: only the server's choice can free a connection.
    let server = start(config(3600, 2)).await;
    let idle = idle_after(server.address, KEEP_ALIVE_REQUEST, "{\"slots\":[]}").await;
    // Mid-request: half a head. Accepted before the newcomer (the backlog is first in, first
    // out), so both connections are taken when the newcomer comes.
    let mut stalled = stalled(server.address).await;

    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        exchange(server.address, NORMAL_REQUEST),
    )
    .await
    .expect("the newcomer was not served: no idle connection was closed for it");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    closed_within_a_minute(idle, "the idle keep-alive connection").await;

    // The stalled client, mid-request all along, was not closed: its request completes.
    stalled
        .write_all(b"Connection: close\r\n\r\n")
        .await
        .unwrap();
    let rest = read_until(&mut stalled, "{\"slots\":[]}").await;
    assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_whose_last_request_had_a_body_makes_room_too() {
    let server = start(config(3600, 1)).await;
    // A body sent whole, by length and then chunked, each answered (404: no such slot).
    let mut idle = TcpStream::connect(server.address).await.unwrap();
    for request in [
        &b"POST /slots/99/hold HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\n\
           Content-Length: 14\r\n\r\n{\"quantity\":1}"[..],
        b"POST /slots/99/hold HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\n\
          Transfer-Encoding: chunked\r\n\r\ne\r\n{\"quantity\":1}\r\n0\r\n\r\n",
    ] {
        idle.write_all(request).await.unwrap();
        let answer = read_until(&mut idle, "\"code\":\"slot_not_found\"}").await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        exchange(server.address, NORMAL_REQUEST),
    )
    .await
    .expect("the newcomer was not served: the idle connection was not closed for it");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    closed_within_a_minute(idle, "the idle keep-alive connection").await;
}

/// A router whose responses the test controls: `/fast` answers `ok` (and
/// `/slots/availability`, `slots`); `/held` answers once
/// `release` is sent (a request in the handler); `/stream` sends the chunks the test sends on
/// its channel and ends when the channel closes (a response in the middle of its body).
fn controlled_router() -> (
    axum::Router,
    oneshot::Sender<()>,
    tokio::sync::mpsc::Sender<axum::body::Bytes>,
) {
    use axum::routing::get;
    use std::sync::Mutex;
    let (release, released) = oneshot::channel::<()>();
    let (chunks, chunks_rx) = tokio::sync::mpsc::channel::<axum::body::Bytes>(8);
    let released = Arc::new(Mutex::new(Some(released)));
    let chunks_rx = Arc::new(Mutex::new(Some(chunks_rx)));
    let app = axum::Router::new()
        .route("/fast", get(|| async { "ok" }))
        .route("/slots/availability", get(|| async { "slots" }))
        .route(
            "/held",
            get(move || {
                let released = released.lock().unwrap().take();
                async move {
                    if let Some(released) = released {
                        let _ = released.await;
                    }
                    "released"
                }
            }),
        )
        .route(
            "/stream",
            get(move || {
                let receiver = chunks_rx.lock().unwrap().take().unwrap();
                async move { axum::body::Body::new(Chunks(receiver)) }
            }),
        );
    (app, release, chunks)
}

/// A response body made of the chunks sent on a channel, ending when it closes.
struct Chunks(tokio::sync::mpsc::Receiver<axum::body::Bytes>);

impl axum::body::HttpBody for Chunks {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|chunk| Ok(hyper::body::Frame::data(chunk))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_connections_mid_request_or_mid_response_are_never_closed() {
    let (app, release, chunks) = controlled_router();
    let server = start_app(app, config(3600, 3)).await;

    // Mid-response: the head and a first chunk are out, the body is not over.
    let mut streaming = TcpStream::connect(server.address).await.unwrap();
    streaming
        .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    chunks.send("first-chunk".into()).await.unwrap();
    let head = read_until(&mut streaming, "first-chunk\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Mid-request: its handler has not answered yet.
    let mut held = TcpStream::connect(server.address).await.unwrap();
    held.write_all(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Idle between requests.
    let idle = idle_after(
        server.address,
        b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n",
        "\r\n\r\nok",
    )
    .await;

    // The first newcomer takes the idle connection's place.
    let fast_and_close = b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        exchange(server.address, fast_and_close),
    )
    .await
    .expect("the first newcomer was not served");
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    closed_within_a_minute(idle, "the idle keep-alive connection").await;

    // The limit is taken by the two busy connections and a stalled one: the next newcomer
    // waits, and closes none of them. When the held request is answered, its connection goes
    // idle and makes room.
    let mut stalled = stalled(server.address).await;
    let newcomer = tokio::spawn(exchange(server.address, fast_and_close));
    release.send(()).unwrap();
    let released = read_until(&mut held, "released").await;
    assert!(released.starts_with("HTTP/1.1 200"), "{released}");
    let answer = tokio::time::timeout(Duration::from_secs(60), newcomer)
        .await
        .expect("the second newcomer was not served")
        .unwrap();
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    closed_within_a_minute(held, "the connection idle after its held request").await;

    // The response in the middle of its body was never cut: it ends whole, and its connection
    // serves another request.
    chunks.send("last-chunk".into()).await.unwrap();
    drop(chunks);
    let rest = read_until(&mut streaming, "last-chunk\r\n0\r\n\r\n").await;
    // Nothing but the last chunk (10 bytes) and the end.
    assert!(
        rest.eq_ignore_ascii_case("a\r\nlast-chunk\r\n0\r\n\r\n"),
        "{rest}"
    );
    streaming
        .write_all(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let again = read_until(&mut streaming, "\r\n\r\nok").await;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    // And the stalled client's request, mid-head all along, completes.
    stalled
        .write_all(b"Connection: close\r\n\r\n")
        .await
        .unwrap();
    let rest = read_until(&mut stalled, "\r\n\r\nslots").await;
    assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
}

/// Awaits every future (without a futures-util dependency).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) {
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    for task in tasks {
        task.await.unwrap();
    }
}
