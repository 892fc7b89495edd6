//! What a read returns: the shared value, how old it is and how it was served.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

/// How a read was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Served {
    /// A fresh value, without any load (a hit).
    Fresh,
    /// The previous value, past its freshness, while a refresh runs or after one failed.
    Stale,
    /// The value of a load the read waited for: nothing was cached, or it was too old or
    /// invalidated (a miss).
    Loaded,
}

impl Served {
    /// `fresh`, `stale` or `loaded`.
    pub const fn name(self) -> &'static str {
        match self {
            Served::Fresh => "fresh",
            Served::Stale => "stale",
            Served::Loaded => "loaded",
        }
    }
}

/// A value read from the cache: a shared pointer to it, plus how old it is.
#[derive(Debug)]
pub struct Snapshot<T> {
    pub(super) value: Arc<T>,
    /// Time since the load that produced the value began, when the read was served.
    pub(super) age: Duration,
    /// The cache's freshness period.
    pub(super) period: Duration,
    /// How the read was served.
    pub(super) served: Served,
}

impl<T> Snapshot<T> {
    /// The shared value.
    pub fn value(&self) -> &Arc<T> {
        &self.value
    }

    /// Takes the shared value out.
    pub fn into_value(self) -> Arc<T> {
        self.value
    }

    /// How much longer this value is fresh; zero for a stale copy.
    pub fn fresh_for(&self) -> Duration {
        self.period.saturating_sub(self.age)
    }

    /// How long before the read the load that produced this value began (tokio time).
    pub fn age(&self) -> Duration {
        self.age
    }

    /// How the read was served: a fresh hit, a stale copy, or a load it waited for.
    pub fn served(&self) -> Served {
        self.served
    }
}

impl<T> Clone for Snapshot<T> {
    fn clone(&self) -> Self {
        Snapshot {
            value: Arc::clone(&self.value),
            age: self.age,
            period: self.period,
            served: self.served,
        }
    }
}

impl<T> Deref for Snapshot<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}
