//! The oracle: model-based property tests. Random operation sequences run against a store through the
//! engine and against a plain sequential model, which decides the expected outcome of every
//! step. After every step the store's slots and holds must equal the model's, which implies the
//! capacity invariant; the invariant is also checked on its own so a failure names it.
//!
//! Backends run it with [`check`]; `PROPTEST_CASES` raises the case count.
//!
//! The parts: the operations (`ops`) and how sequences of them are generated (`strategies`);
//! the reference model, which decides each outcome (`reference`); the writes run through the
//! engine or a transaction and the model side by side (`writes`); the sequential runner and
//! property harness (`runner`, [`check`]); the events a step must append
//! (`expected_events`, [`check_events`]); concurrent batches (`concurrent`,
//! [`check_concurrent`]); and transactions (`transaction_steps`, [`check_transactional`]).

use std::fmt;

/// A step whose outcome differed from the model's, or a broken invariant.
struct Mismatch(String);

impl fmt::Debug for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(Mismatch(format!($($msg)*)));
        }
    };
}

mod admin;
mod bookings;
mod candidates;
mod concurrent;
mod concurrent_bookings;
mod concurrent_pools;
mod expected_events;
mod ops;
mod pools;
mod reference;
mod runner;
mod strategies;
mod transaction_steps;
mod waitlists;
mod writes;

pub use bookings::{booking_op, check_booking_events, check_bookings};
pub use concurrent::{check_concurrent, Batch};
pub use concurrent_bookings::{check_concurrent_bookings, BookingStep};
pub use concurrent_pools::check_concurrent_pools;
pub use expected_events::check_events;
pub use ops::{ModelOp, LEASE};
pub use pools::{check_pools, pool_op};
pub use runner::check;
pub use strategies::{admin_op, lifecycle_op, op, query_op, sequence};
pub use transaction_steps::{check_transactional, TransactionStep};
pub use waitlists::{check_pool_waitlists, check_waitlists};
