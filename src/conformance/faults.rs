//! A [`Store`](crate::Store) wrapper that misbehaves on purpose, for fault-injection tests.
//!
//! [`FaultyStore`] fails (transiently or not), stalls, or panics at random — before the inner
//! store runs (nothing happened) or after it returned (it committed, but the caller hears an
//! error, as when a connection drops after `COMMIT`). Randomness is a seeded xorshift, so a
//! failing run can be replayed with the same seed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::store::{HoldQueries, HoldStore, SlotAdmin, StoreError};

/// How often each fault strikes, in percent of calls (checked in this order).
#[derive(Debug, Clone, Copy)]
pub struct FaultRates {
    /// A transient error instead of the call.
    pub fail_before: u8,
    /// A transient error after the call committed.
    pub fail_after: u8,
    /// A non-transient error instead of the call.
    pub fail_permanently: u8,
    /// A panic instead of the call.
    pub panic_before: u8,
    /// A panic after the call committed.
    pub panic_after: u8,
    /// A pause of up to `max_stall` before the call.
    pub stall: u8,
    /// Longest pause.
    pub max_stall: Duration,
}

impl FaultRates {
    /// No faults.
    pub const NONE: FaultRates = FaultRates {
        fail_before: 0,
        fail_after: 0,
        fail_permanently: 0,
        panic_before: 0,
        panic_after: 0,
        stall: 0,
        max_stall: Duration::ZERO,
    };

    /// Every kind of fault, often.
    pub const CHAOS: FaultRates = FaultRates {
        fail_before: 8,
        fail_after: 8,
        fail_permanently: 4,
        panic_before: 4,
        panic_after: 4,
        stall: 15,
        max_stall: Duration::from_millis(20),
    };
}

/// Wraps a store and injects faults at the configured rates while enabled.
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    rates: FaultRates,
    enabled: AtomicBool,
    rng: AtomicU64,
}

enum Fault {
    Before(StoreError),
    After(StoreError),
    PanicBefore,
    PanicAfter,
    Stall(Duration),
    None,
}

impl<S: HoldStore> FaultyStore<S> {
    /// Wraps `inner`; faults are enabled from the start.
    pub fn new(inner: S, rates: FaultRates, seed: u64) -> Self {
        FaultyStore {
            inner,
            rates,
            enabled: AtomicBool::new(true),
            rng: AtomicU64::new(seed | 1),
        }
    }

    /// Turns faults on or off.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::SeqCst);
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn next(&self) -> u64 {
        // xorshift64; a lost update between threads only changes which fault strikes.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x
    }

    fn draw(&self) -> Fault {
        if !self.enabled.load(Ordering::SeqCst) {
            return Fault::None;
        }
        let roll = (self.next() % 100) as u8;
        let r = self.rates;
        let mut edge = 0u8;
        let mut hit = |rate: u8| {
            edge = edge.saturating_add(rate);
            roll < edge
        };
        if hit(r.fail_before) {
            Fault::Before(StoreError::unavailable("injected: connection refused"))
        } else if hit(r.fail_after) {
            Fault::After(StoreError::unavailable(
                "injected: connection lost after commit",
            ))
        } else if hit(r.fail_permanently) {
            Fault::Before(StoreError::failed("injected: permanent failure"))
        } else if hit(r.panic_before) {
            Fault::PanicBefore
        } else if hit(r.panic_after) {
            Fault::PanicAfter
        } else if hit(r.stall) {
            let max = r.max_stall.as_micros().max(1) as u64;
            Fault::Stall(Duration::from_micros(self.next() % max))
        } else {
            Fault::None
        }
    }

    async fn around<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.draw() {
            Fault::Before(error) => Err(error),
            Fault::PanicBefore => panic!("injected panic before the store call"),
            Fault::Stall(pause) => {
                tokio::time::sleep(pause).await;
                call.await
            }
            Fault::After(error) => {
                let _ = call.await;
                Err(error)
            }
            Fault::PanicAfter => {
                let _ = call.await;
                panic!("injected panic after the store call")
            }
            Fault::None => call.await,
        }
    }
}

crate::forward_store!(
    impl[S: HoldStore] HoldStore for FaultyStore<S>,
    |this| &this.inner,
    |call| this.around(call).await
);
crate::forward_store!(
    impl[S: HoldStore + SlotAdmin] SlotAdmin for FaultyStore<S>,
    |this| &this.inner,
    |call| this.around(call).await
);
crate::forward_store!(
    impl[S: HoldStore + HoldQueries] HoldQueries for FaultyStore<S>,
    |this| &this.inner,
    |call| this.around(call).await
);
