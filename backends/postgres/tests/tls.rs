//! TLS to the server (feature `tls-rustls`): with `sslmode=require` the store's connections are
//! encrypted, as PostgreSQL's own `pg_stat_ssl` reports, and the store works over them. The
//! local test server has `ssl = on` with a self-signed certificate, which `require` accepts
//! and `verify-full` must refuse.
#![cfg(feature = "tls-rustls")]

mod common;

use common::*;
use slot_booking::HoldOutcome;
use slot_booking::HoldStore;
use slot_booking_postgres::PostgresStore;

/// `url` with `sslmode` set to `mode`, whether or not it already has a query string.
fn with_sslmode(url: &str, mode: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode={mode}")
}

/// Whether the connection answering is encrypted, by the server's account.
async fn encrypted(store: &PostgresStore) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_encrypts_every_connection() {
    let Some(ctx) = setup("sslmode_require").await else {
        return;
    };
    let store = PostgresStore::connect(&with_sslmode(&ctx.url, "require"))
        .await
        .unwrap();
    let store = PostgresStore::with_schema(store.pool().clone(), ctx.schema()).unwrap();
    store.migrate().await.unwrap();
    assert!(encrypted(&store).await);
    let slot_id = slot(&store, 1).await;
    assert!(matches!(
        hold(&store, slot_id, "over-tls", at(0)).await,
        HoldOutcome::Created(_)
    ));
    assert_eq!(
        store
            .get_slot(slot_id)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining,
        0
    );
}

/// The check above can fail: the same server without TLS reports an unencrypted connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_disable_is_reported_unencrypted() {
    let Some(ctx) = setup("sslmode_disable").await else {
        return;
    };
    let store = PostgresStore::connect(&with_sslmode(&ctx.url, "disable"))
        .await
        .unwrap();
    assert!(!encrypted(&store).await);
}

/// `verify-full` checks the certificate against the trusted roots: a self-signed one is
/// refused, as a permanent error (retrying will not help), not an unencrypted fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_verify_full_refuses_a_self_signed_certificate() {
    let Some(ctx) = setup("sslmode_verify_full").await else {
        return;
    };
    match PostgresStore::connect(&with_sslmode(&ctx.url, "verify-full")).await {
        Ok(_) => panic!("connected over an unverified certificate"),
        Err(error) => assert!(!error.is_transient(), "{error} is reported as transient"),
    }
}
