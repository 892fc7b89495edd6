//! Outcomes: what a call's result is labelled with.

use super::catalogue::OK;
use crate::error::{store_code, BookingError};
use crate::store::StoreError;

/// Every outcome with metric keys of their own: [`OK`], then each of [`BookingError::CODES`].
/// An outcome not listed is still recorded, through a key built on the spot.
pub(super) const OUTCOMES: [&str; 1 + BookingError::CODES.len()] = {
    let mut outcomes = [OK; 1 + BookingError::CODES.len()];
    let mut i = 0;
    while i < BookingError::CODES.len() {
        outcomes[i + 1] = BookingError::CODES[i];
        i += 1;
    }
    outcomes
};

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
            Err(error) => store_code(error),
        }
    }
}
