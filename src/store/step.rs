//! [`Step`]: what one atomic step of a store decided, and whether its writes stay.

use super::StoreError;

/// What one atomic step of a store decided, and whether its writes stay.
///
/// A store that runs each operation inside a unit of work it opens (a transaction, or a
/// savepoint inside the caller's transaction) has the operation answer a `Step`, then commits
/// (or releases) the unit when the writes stay, and rolls it back when they do not: a refusal
/// changes nothing, even when the step wrote before it found it had to refuse. The same
/// operation then serves the store's own transactions and the caller's.
///
/// ```
/// use slot_booking::store::Step;
///
/// let refused = Step::undo("sold out");
/// assert!(!refused.keep);
/// let placed = Step::keep(7).try_map(|id| Ok::<_, slot_booking::StoreError>(id + 1)).unwrap();
/// assert_eq!((placed.value, placed.keep), (8, true));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step<T> {
    /// The outcome.
    pub value: T,
    /// Whether the step's writes stay (commit) or are undone (roll back).
    pub keep: bool,
}

impl<T> Step<T> {
    /// An outcome whose writes stay.
    pub fn keep(value: T) -> Self {
        Step { value, keep: true }
    }

    /// An outcome whose writes (if any) are undone: a refusal changes nothing.
    pub fn undo(value: T) -> Self {
        Step { value, keep: false }
    }

    /// The outcome.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The same step with its outcome mapped by `f`.
    pub fn try_map<U>(
        self,
        f: impl FnOnce(T) -> Result<U, StoreError>,
    ) -> Result<Step<U>, StoreError> {
        Ok(Step {
            value: f(self.value)?,
            keep: self.keep,
        })
    }
}

impl<T> Step<Option<T>> {
    /// An outcome that keeps its writes when it has a value and undoes them when it has
    /// none: a step all or nothing of whose writes stay.
    ///
    /// ```
    /// use slot_booking::store::Step;
    ///
    /// assert!(Step::some(Some(3)).keep);
    /// assert!(!Step::<Option<u8>>::some(None).keep);
    /// ```
    pub fn some(value: Option<T>) -> Self {
        let keep = value.is_some();
        Step { value, keep }
    }
}
