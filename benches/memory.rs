//! `MemoryStore` hold throughput against a plain `Mutex<HashMap>` doing the same bookkeeping
//! (unique key map, per-slot remaining, hold rows), on one thread and on two. Also the same
//! holds through the engine (validation, clock, detached write task), without and with a cached
//! availability listing that each hold patches.

// criterion_group!/criterion_main! generate undocumented items.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use slot_booking::{
    BookingEngine, HoldRequest, HoldStore, IdempotencyKey, MemoryStore, NewSlot, SlotId, Timestamp,
};

const SLOTS: usize = 1_000;

/// The baseline: one lock, a key map, remaining per slot, and the hold rows.
#[derive(Default)]
struct Baseline {
    inner: Mutex<BaselineInner>,
}

#[derive(Default)]
struct BaselineInner {
    remaining: Vec<i32>,
    keys: HashMap<String, usize>,
    holds: Vec<(usize, Timestamp)>,
}

impl Baseline {
    fn new() -> Self {
        let baseline = Baseline::default();
        baseline.inner.lock().unwrap().remaining = vec![i32::MAX; SLOTS];
        baseline
    }

    fn hold(&self, slot: usize, key: &str, expires_at: Timestamp) -> Option<usize> {
        let mut inner = self.inner.lock().unwrap();
        if let Some(&existing) = inner.keys.get(key) {
            return Some(existing);
        }
        if inner.remaining[slot] == 0 {
            return None;
        }
        inner.remaining[slot] -= 1;
        let id = inner.holds.len();
        inner.holds.push((slot, expires_at));
        inner.keys.insert(key.to_owned(), id);
        Some(id)
    }
}

async fn store_with_slots() -> (MemoryStore, Vec<SlotId>) {
    let store = MemoryStore::new();
    let start = Utc::now() + chrono::Duration::days(1);
    let mut slots = Vec::new();
    for i in 0..SLOTS as i64 {
        let starts_at = start + chrono::Duration::minutes(i);
        let slot = store
            .create_slot(
                &NewSlot::new(starts_at, starts_at + chrono::Duration::hours(1), i32::MAX),
                chrono::Utc::now(),
            )
            .await
            .unwrap();
        slots.push(slot.slot_id);
    }
    (store, slots)
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Holds per measured batch: each batch starts from a fresh store (set up outside the
/// timing), so every batch does the same work on the same amount of state.
const BATCH: usize = 20_000;

fn one_thread(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let now = Utc::now();
    let expires_at = now + chrono::Duration::minutes(5);

    let mut group = c.benchmark_group("memory_holds_one_thread");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("Mutex<HashMap> (baseline)", |b| {
        b.iter_batched(
            || (Baseline::new(), keys("b", BATCH)),
            |(baseline, keys)| {
                for (i, key) in keys.iter().enumerate() {
                    black_box(baseline.hold(i % SLOTS, key, expires_at));
                }
                baseline
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("MemoryStore::create_hold", |b| {
        b.iter_batched(
            || (rt.block_on(store_with_slots()), keys("s", BATCH)),
            |((store, slots), keys)| {
                rt.block_on(async {
                    for (i, key) in keys.into_iter().enumerate() {
                        let key = IdempotencyKey::new(key).unwrap();
                        let request = HoldRequest {
                            slot_id: slots[i % SLOTS],
                            owner: None,
                            quantity: 1,
                            key: &key,
                            now,
                            expires_at,
                        };
                        black_box(store.create_hold(request).await.unwrap());
                    }
                });
                store
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("BookingEngine::hold over MemoryStore", |b| {
        b.iter_batched(
            || {
                let (store, slots) = rt.block_on(store_with_slots());
                (BookingEngine::new(store), slots, keys("e", BATCH))
            },
            |(engine, slots, keys)| {
                rt.block_on(async {
                    for (i, key) in keys.iter().enumerate() {
                        black_box(engine.hold(slots[i % SLOTS], key).await.unwrap());
                    }
                });
                engine
            },
            BatchSize::PerIteration,
        )
    });
    // The same with the 1,000-slot listing cached: each hold patches it (the engine's own
    // holds show in its listing at once), against the line above, which has nothing to patch.
    group.bench_function("BookingEngine::hold, listing cached", |b| {
        b.iter_batched(
            || {
                let (store, slots) = rt.block_on(store_with_slots());
                let engine = BookingEngine::builder(store)
                    .cache_period(Duration::from_secs(3600))
                    .build();
                rt.block_on(engine.availability(slot_booking::AvailabilityQuery::all()))
                    .unwrap();
                (engine, slots, keys("c", BATCH))
            },
            |(engine, slots, keys)| {
                rt.block_on(async {
                    for (i, key) in keys.iter().enumerate() {
                        black_box(engine.hold(slots[i % SLOTS], key).await.unwrap());
                    }
                });
                engine
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn two_threads(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let now = Utc::now();
    let expires_at = now + chrono::Duration::minutes(5);

    let mut group = c.benchmark_group("memory_holds_two_threads");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("Mutex<HashMap> (baseline)", |b| {
        b.iter_batched(
            || {
                (
                    Baseline::new(),
                    [keys("b0", BATCH / 2), keys("b1", BATCH / 2)],
                )
            },
            |(baseline, halves)| {
                std::thread::scope(|scope| {
                    for (t, half) in halves.iter().enumerate() {
                        let baseline = &baseline;
                        scope.spawn(move || {
                            for (i, key) in half.iter().enumerate() {
                                black_box(baseline.hold((i * 2 + t) % SLOTS, key, expires_at));
                            }
                        });
                    }
                });
                baseline
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("MemoryStore::create_hold", |b| {
        b.iter_batched(
            || {
                let (store, slots) = rt.block_on(store_with_slots());
                let halves = [keys("s0", BATCH / 2), keys("s1", BATCH / 2)];
                (Arc::new(store), Arc::new(slots), halves)
            },
            |(store, slots, halves)| {
                rt.block_on(async {
                    let tasks: Vec<_> = halves
                        .into_iter()
                        .enumerate()
                        .map(|(t, half)| {
                            let store = Arc::clone(&store);
                            let slots = Arc::clone(&slots);
                            tokio::spawn(async move {
                                for (i, key) in half.into_iter().enumerate() {
                                    let key = IdempotencyKey::new(key).unwrap();
                                    let request = HoldRequest {
                                        slot_id: slots[(i * 2 + t) % SLOTS],
                                        owner: None,
                                        quantity: 1,
                                        key: &key,
                                        now,
                                        expires_at,
                                    };
                                    black_box(store.create_hold(request).await.unwrap());
                                }
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.unwrap();
                    }
                });
                store
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    targets = one_thread, two_threads
}
criterion_main!(benches);
