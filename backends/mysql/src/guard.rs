//! The guard every write statement of the store starts with: a write runs only inside its
//! step's transaction, and leaves no session state behind (see [`units`](crate::units)).

/// What every write statement starts with: it runs as written inside a transaction, and fails
/// (1792, a conflict: the step runs again) when no transaction is open, so a write can never
/// commit on its own in autocommit after Galera ended its step's transaction under it (see
/// [`units`](crate::units)). `SET STATEMENT` (MariaDB) sets the access mode for the statement
/// alone: a step cut at any point leaves no session state behind.
pub(crate) const WRITE_GUARD: &str = "SET STATEMENT tx_read_only = 1 FOR ";

/// `format!` of a write statement, prefixed with [`WRITE_GUARD`].
macro_rules! write_statement {
    ($($format:tt)*) => {
        format!("{}{}", $crate::guard::WRITE_GUARD, format_args!($($format)*))
    };
}

pub(crate) use write_statement;
