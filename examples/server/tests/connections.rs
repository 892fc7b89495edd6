//! The server's connection bounds, over real sockets: stalled clients are cut off at the header
//! timeout and cannot starve others, the connection limit holds without failing, bodies have a
//! timeout, malformed bodies are 400 (not 413), and shutdown ends within its grace period.

use std::sync::Arc;
use std::time::{Duration, Instant};

use slot_booking::{BookingEngine, MemoryStore, Store};
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
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine: Engine = BookingEngine::new(store);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let app = router_with_config(engine, &config);
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

/// Awaits every future (without a futures-util dependency).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) {
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    for task in tasks {
        task.await.unwrap();
    }
}
