//! Outcomes: what a call's result is labelled with.

use super::catalogue::OK;
use crate::error::BookingError;
use crate::store::StoreError;

/// The outcome label of a result: [`OK`] or the error's code.
pub fn outcome<T>(result: &Result<T, BookingError>) -> &'static str {
    match result {
        Ok(_) => OK,
        Err(error) => error.code(),
    }
}

/// What a run's result says about its outcome.
pub(crate) trait Outcome {
    /// Whether the call succeeded.
    fn is_ok(&self) -> bool;

    /// [`OK`] or the error's code.
    fn outcome(&self) -> &'static str;
}

impl<T> Outcome for Result<T, BookingError> {
    fn is_ok(&self) -> bool {
        self.is_ok()
    }

    fn outcome(&self) -> &'static str {
        outcome(self)
    }
}

impl<T> Outcome for Result<T, StoreError> {
    fn is_ok(&self) -> bool {
        self.is_ok()
    }

    fn outcome(&self) -> &'static str {
        match self {
            Ok(_) => OK,
            Err(error) if error.is_transient() => "store_unavailable",
            Err(_) => "store_failed",
        }
    }
}
