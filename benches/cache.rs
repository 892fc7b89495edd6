//! The availability cache, against baselines measured in the same run:
//!
//! - a warm hit of `availability()` over 1,000 slots vs a `moka::future::Cache` hit holding the
//!   same `Arc` snapshot (target: at least as fast, no per-entry copy);
//! - a filtered query (`from`/`to`) on the same warm snapshot;
//! - 10,000 concurrent cold reads (after `invalidate()`) vs one bare store read, counting the
//!   store reads they cause (target: exactly 1).
//!
//! `CACHE_HIT_LOOP=N` runs none of that: N warm hits in a plain loop, then the time per hit,
//! so that two builds can be compared by timing the whole process (the observability check:
//! with nothing installed the hit must cost what it cost before spans and metrics). Add
//! `CACHE_HIT_RECORDER=prometheus` to install a Prometheus recorder first, and
//! `CACHE_HIT_TRACING=info` or `=debug` for a `fmt` subscriber at that level (the engine's
//! spans are `DEBUG`), writing to nowhere.

// criterion_group!/criterion_main! generate undocumented items.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use criterion::{criterion_group, Criterion};
use slot_booking::store::{Decided, HoldOutcome, HoldRequest, RenewRequest, Transition};
use slot_booking::{
    AvailabilityEntry, AvailabilityQuery, AvailabilitySnapshot, BookingEngine, Hold, HoldId,
    HoldStore, MemoryStore, NewSlot, Scope, Slot, SlotId, StoreError, Timestamp,
};

/// A memory store that counts availability reads.
#[derive(Default)]
struct Counting {
    inner: MemoryStore,
    reads: AtomicUsize,
}

#[async_trait]
impl HoldStore for Counting {
    async fn create_slot(&self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError> {
        self.inner.create_slot(slot, now).await
    }
    async fn availability(
        &self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.availability(now).await
    }
    async fn create_hold(
        &self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        self.inner.create_hold(request).await
    }
    async fn confirm_hold(
        &self,
        id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        self.inner.confirm_hold(id, scope, now).await
    }
    async fn cancel_hold(
        &self,
        id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        self.inner.cancel_hold(id, scope, now).await
    }
    async fn renew_hold(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        self.inner.renew_hold(request).await
    }
    async fn get_hold(
        &self,
        id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        self.inner.get_hold(id, scope, now).await
    }
    async fn get_slot(&self, id: SlotId) -> Result<Option<Slot>, StoreError> {
        self.inner.get_slot(id).await
    }
}

slot_booking::forward_store!(impl[] SlotAdmin, HoldQueries for Counting, |this| &this.inner);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn engine_with_slots(n: i64) -> BookingEngine<Counting> {
    let engine = BookingEngine::builder(Counting::default())
        .cache_period(Duration::from_secs(3600))
        .build();
    let first = Utc::now() + chrono::Duration::days(1);
    for i in 0..n {
        let starts_at = first + chrono::Duration::minutes(i);
        engine
            .create_slot(NewSlot::new(
                starts_at,
                starts_at + chrono::Duration::hours(1),
                5,
            ))
            .await
            .unwrap();
    }
    engine
}

fn warm_hit(c: &mut Criterion) {
    let rt = runtime();
    let engine = rt.block_on(engine_with_slots(1_000));
    let snapshot = rt.block_on(async {
        let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
        Arc::clone(listing.snapshot())
    });
    let moka: moka::future::Cache<(), Arc<AvailabilitySnapshot>> = moka::future::Cache::builder()
        .time_to_live(Duration::from_secs(3600))
        .build();
    rt.block_on(moka.insert((), Arc::clone(&snapshot)));
    let reads_before = engine.store().reads.load(Ordering::Relaxed);

    let mut group = c.benchmark_group("warm_hit_1000_slots");
    group.bench_function("slot_booking availability()", |b| {
        b.to_async(&rt).iter(|| async {
            let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
            black_box(listing.len())
        })
    });
    group.bench_function("moka get (baseline)", |b| {
        b.to_async(&rt).iter(|| async {
            let listing = moka.get(&()).await.unwrap();
            black_box(listing.entries.len())
        })
    });
    let from = Utc::now() + chrono::Duration::days(1) + chrono::Duration::minutes(100);
    let query = AvailabilityQuery::all()
        .from(from)
        .to(from + chrono::Duration::minutes(50));
    group.bench_function("slot_booking availability(from..to)", |b| {
        b.to_async(&rt).iter(|| async {
            let listing = engine.availability(query.clone()).await.unwrap();
            black_box(listing.len())
        })
    });
    group.finish();
    let reads = engine.store().reads.load(Ordering::Relaxed) - reads_before;
    let listing = rt
        .block_on(engine.availability(AvailabilityQuery::all()))
        .unwrap();
    println!(
        "warm hits: {reads} store reads; snapshot shared, not copied: {}",
        Arc::ptr_eq(listing.snapshot(), &snapshot)
    );
}

fn cold_reads(c: &mut Criterion) {
    let rt = runtime();
    let engine = rt.block_on(engine_with_slots(1_000));
    let mut group = c.benchmark_group("cold_reads_1000_slots");
    group.sample_size(20);
    group.bench_function("one bare store read (baseline)", |b| {
        b.to_async(&rt).iter(|| async {
            let entries = engine
                .store()
                .inner
                .availability(Utc::now())
                .await
                .unwrap()
                .outcome;
            black_box(entries.len())
        })
    });
    let worst = Arc::new(AtomicUsize::new(0));
    group.bench_function("10,000 concurrent cold readers", |b| {
        b.to_async(&rt).iter_custom(|iterations| {
            let engine = engine.clone();
            let worst = Arc::clone(&worst);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    engine.invalidate_availability();
                    let before = engine.store().reads.load(Ordering::SeqCst);
                    let started = Instant::now();
                    let readers: Vec<_> = (0..10_000)
                        .map(|_| {
                            let engine = engine.clone();
                            tokio::spawn(async move {
                                engine
                                    .availability(AvailabilityQuery::all())
                                    .await
                                    .map(|listing| listing.len())
                            })
                        })
                        .collect();
                    for reader in readers {
                        black_box(reader.await.unwrap().unwrap());
                    }
                    total += started.elapsed();
                    let reads = engine.store().reads.load(Ordering::SeqCst) - before;
                    worst.fetch_max(reads, Ordering::SeqCst);
                }
                total
            }
        })
    });
    group.finish();
    println!(
        "10,000 concurrent cold readers: at most {} store read(s) per round",
        worst.load(Ordering::SeqCst)
    );
}

/// `CACHE_HIT_LOOP=N`: instead of the criterion groups, N warm hits of `availability()` over
/// 1,000 slots in a plain loop, then the time per hit on stdout. A fixed amount of work, so two
/// builds can be compared by timing the whole process.
fn hit_loop(iterations: u64) {
    if std::env::var("CACHE_HIT_RECORDER").is_ok_and(|r| r == "prometheus") {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .unwrap();
        slot_booking::observe::describe();
    }
    let level = match std::env::var("CACHE_HIT_TRACING").as_deref() {
        Ok("debug") => Some(tracing::Level::DEBUG),
        Ok("info") => Some(tracing::Level::INFO),
        _ => None,
    };
    if let Some(level) = level {
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::sink)
            .init();
    }
    let rt = runtime();
    let engine = rt.block_on(engine_with_slots(1_000));
    rt.block_on(async {
        engine.availability(AvailabilityQuery::all()).await.unwrap();
        let started = Instant::now();
        for _ in 0..iterations {
            let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
            black_box(listing.len());
        }
        let per_hit = started.elapsed().as_nanos() as f64 / iterations.max(1) as f64;
        println!("{iterations} warm hits: {per_hit:.1} ns per hit");
    });
}

criterion_group!(benches, warm_hit, cold_reads);

fn main() {
    if let Some(iterations) = std::env::var("CACHE_HIT_LOOP")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        hit_loop(iterations);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
