//! [`CapacityChange`]: how an operator moves a slot's or a pool's capacity without losing a
//! concurrent change.

use serde::{Deserialize, Serialize};

/// How a capacity changes, decided by the store in one conditional update of the row, like
/// every change: never by a read made before it.
///
/// - [`To`](Self::To) sets it, whatever it was: the last of two concurrent settings wins.
/// - [`By`](Self::By) moves it by a number of units (`By(1)` adds one, `By(-2)` takes two
///   away): concurrent moves add up, none is lost (fifty concurrent `By(1)` raise it by
///   fifty).
/// - [`Replace`](Self::Replace) sets it only while it is still the capacity the caller read
///   (compare-and-set): a concurrent change in between refuses it with `capacity_changed`
///   (`pool_capacity_changed` for a pool), naming the capacity found, and nothing changes.
///
/// Lowering takes free units only, as ever (`capacity_taken` / `pool_in_use` otherwise); the
/// capacity after the change must be in range (`1..=i32::MAX` for a slot, `0..=i32::MAX` for
/// a pool). A plain `i32` converts to [`To`](Self::To).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityChange {
    /// Set the capacity to this.
    To(i32),
    /// Move the capacity by this many units (negative: fewer).
    By(i32),
    /// Set the capacity to `to` only while it is `expected`.
    Replace {
        /// The capacity the caller read.
        expected: i32,
        /// The capacity to set.
        to: i32,
    },
}

impl From<i32> for CapacityChange {
    fn from(capacity: i32) -> Self {
        CapacityChange::To(capacity)
    }
}

/// A [`CapacityChange`] as a store writes it in one conditional update: the new capacity is
/// `keep * capacity + add` (`keep` is 0 or 1), and the update applies only while the capacity
/// is `expected`, when there is one. In SQL, with the row's `capacity` and 64-bit arithmetic:
/// `SET capacity = keep * capacity + add, remaining = remaining + ((keep - 1) * capacity + add)
/// WHERE (expected IS NULL OR capacity = expected) AND keep * capacity + add BETWEEN low AND
/// 2147483647 AND remaining + ((keep - 1) * capacity + add) >= 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityTerms {
    /// 1 when the old capacity counts (a move), 0 when it is replaced.
    pub keep: i64,
    /// Added to `keep * capacity`.
    pub add: i64,
    /// The capacity the update requires, if any.
    pub expected: Option<i32>,
}

impl CapacityChange {
    /// The capacity this change gives a row whose capacity is `current` (64-bit: a move can
    /// leave `i32`), or `None` when it does not apply to it (a [`Replace`](Self::Replace) of
    /// another capacity).
    pub fn applied_to(self, current: i32) -> Option<i64> {
        match self {
            CapacityChange::To(to) => Some(i64::from(to)),
            CapacityChange::By(units) => Some(i64::from(current) + i64::from(units)),
            CapacityChange::Replace { expected, to } => {
                (current == expected).then_some(i64::from(to))
            }
        }
    }

    /// Whether a row whose capacity is `current` already is as this change asks (the update
    /// then changes nothing and is applied without an event).
    pub fn leaves(self, current: i32) -> bool {
        self.applied_to(current) == Some(i64::from(current))
    }

    /// The change in the terms of one conditional update (see [`CapacityTerms`]).
    pub fn terms(self) -> CapacityTerms {
        match self {
            CapacityChange::To(to) => CapacityTerms {
                keep: 0,
                add: i64::from(to),
                expected: None,
            },
            CapacityChange::By(units) => CapacityTerms {
                keep: 1,
                add: i64::from(units),
                expected: None,
            },
            CapacityChange::Replace { expected, to } => CapacityTerms {
                keep: 0,
                add: i64::from(to),
                expected: Some(expected),
            },
        }
    }

    /// The capacity this change names outright, if it names one (`To`, `Replace`).
    pub fn target(self) -> Option<i32> {
        match self {
            CapacityChange::To(to) | CapacityChange::Replace { to, .. } => Some(to),
            CapacityChange::By(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_applies_as_its_terms_say() {
        for change in [
            CapacityChange::To(7),
            CapacityChange::By(-3),
            CapacityChange::By(i32::MAX),
            CapacityChange::Replace { expected: 5, to: 9 },
            CapacityChange::Replace { expected: 4, to: 9 },
        ] {
            let terms = change.terms();
            for current in [1, 5, i32::MAX] {
                let by_terms = (terms.expected.is_none_or(|e| e == current))
                    .then_some(terms.keep * i64::from(current) + terms.add);
                assert_eq!(
                    change.applied_to(current),
                    by_terms,
                    "{change:?} on {current}"
                );
            }
        }
        assert!(CapacityChange::By(0).leaves(3));
        assert!(CapacityChange::To(3).leaves(3));
        assert!(!CapacityChange::Replace { expected: 2, to: 3 }.leaves(3));
        assert_eq!(CapacityChange::from(4), CapacityChange::To(4));
    }
}
