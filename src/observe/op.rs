//! [`Op`]: the guard every engine operation runs in, recording its span, its store latency
//! and its outcome.

use std::future::Future;
use std::time::Instant;

use metrics::{Key, Label};
use tracing::field::Empty;
use tracing::Span;

use super::cache_metrics::{cache_load_key, served_key};
use super::catalogue::{OPERATIONS, OPERATION_LABEL, OUTCOME_LABEL};
use super::operation::{enabled, listening, operation_key, Operation, OPERATION_KEYS, STORE_KEYS};
use super::outcome::Outcome;
use super::{Served, METADATA};
use crate::model::{HoldId, SlotId};

/// Records one store call of `operation` that took `seconds`.
pub(super) fn store_latency(operation: Operation, seconds: f64) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_histogram(&STORE_KEYS[operation.index()], &METADATA)
            .record(seconds)
    });
}

/// What is being observed: an engine operation, or an availability load.
#[derive(Clone, Copy)]
enum Kind {
    Operation,
    CacheLoad,
}

/// One engine operation (or availability load) being observed: its span, the store time
/// around its store call, and its outcome when it ends. The engine's one choke point for
/// observability: every operation runs in [`Op::run`] and awaits its store through
/// [`Op::store`].
pub(crate) struct Op {
    operation: Operation,
    kind: Kind,
    /// `None` when nothing would record it: no subscriber, or one that does not want it.
    span: Option<Span>,
}

impl Op {
    /// An operation about to run.
    #[inline]
    pub(crate) fn new(operation: Operation) -> Op {
        Op {
            operation,
            kind: Kind::Operation,
            span: if listening() {
                operation.enabled_span()
            } else {
                None
            },
        }
    }

    /// An availability load about to start for the read `parent`, its span that read's child.
    pub(crate) fn cache_load(parent: &Op) -> Op {
        let span = if listening() {
            enabled(tracing::debug_span!(
                target: "slot_booking",
                parent: parent.span.as_ref().and_then(Span::id),
                "cache_load",
                outcome = Empty,
                store_us = Empty,
            ))
        } else {
            None
        };
        Op {
            operation: Operation::Availability,
            kind: Kind::CacheLoad,
            span,
        }
    }

    /// The operation observed.
    pub(crate) fn operation(&self) -> Operation {
        self.operation
    }

    /// Names the slot the operation is about.
    pub(crate) fn slot(self, slot_id: SlotId) -> Op {
        self.record_slot(slot_id);
        self
    }

    /// Records the slot the operation turned out to be about (a hold's, a new slot's).
    pub(crate) fn record_slot(&self, slot_id: SlotId) {
        if let Some(span) = &self.span {
            span.record("slot_id", slot_id.get());
        }
    }

    /// Names the hold the operation is about.
    pub(crate) fn hold(self, hold_id: HoldId) -> Op {
        self.record_hold(hold_id);
        self
    }

    /// Marks an operation run on the caller's transaction.
    pub(crate) fn in_transaction(self) -> Op {
        if let Some(span) = &self.span {
            span.record("transaction", true);
        }
        self
    }

    /// Records the hold the operation turned out to be about (a new hold's id).
    pub(crate) fn record_hold(&self, hold_id: HoldId) {
        if let Some(span) = &self.span {
            span.record("hold_id", hold_id.get());
        }
    }

    /// Records whether a hold was an idempotent replay.
    pub(crate) fn record_replayed(&self, replayed: bool) {
        if let Some(span) = &self.span {
            span.record("replayed", replayed);
        }
    }

    /// Awaits the operation's store call, recording how long that took.
    pub(crate) async fn store<T>(&self, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = call.await;
        let elapsed = started.elapsed();
        store_latency(self.operation, elapsed.as_secs_f64());
        if let Some(span) = &self.span {
            span.record(
                "store_us",
                u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            );
        }
        result
    }

    /// Runs the operation inside its span, then records and counts its outcome.
    pub(crate) async fn run<R: Outcome>(&self, body: impl Future<Output = R>) -> R {
        let mut body = std::pin::pin!(body);
        let result = std::future::poll_fn(|cx| {
            let _entered = self.span.as_ref().map(Span::enter);
            body.as_mut().poll(cx)
        })
        .await;
        self.finish(&result, None);
        result
    }

    /// Records and counts the outcome of an operation that ran outside [`Op::run`], with how
    /// the cache served it (availability): one visit to the recorder for both counters.
    #[inline]
    pub(crate) fn finish<R: Outcome>(&self, result: &R, served: Option<Served>) {
        let outcome = result.outcome();
        if let Some(span) = &self.span {
            span.record("outcome", outcome);
            if let Some(served) = served {
                span.record("cache", served.name());
            }
        }
        let key = match self.kind {
            Kind::Operation if result.is_ok() => Some(&OPERATION_KEYS[self.operation.index()][0]),
            Kind::Operation => operation_key(self.operation, outcome),
            Kind::CacheLoad => Some(cache_load_key(outcome)),
        };
        let served = served.map(served_key);
        metrics::with_recorder(|recorder| {
            match key {
                Some(key) => recorder.register_counter(key, &METADATA).increment(1),
                None => {
                    let labels = vec![
                        Label::new(OPERATION_LABEL, self.operation.name()),
                        Label::new(OUTCOME_LABEL, outcome),
                    ];
                    let key = Key::from_parts(OPERATIONS, labels);
                    recorder.register_counter(&key, &METADATA).increment(1);
                }
            }
            if let Some(key) = served {
                recorder.register_counter(key, &METADATA).increment(1);
            }
        });
    }
}
