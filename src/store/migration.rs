//! One migration a SQL store embeds ([`Migration`]): the same record in every store, each
//! applying its list in version order and recording the versions in a ledger of its own.

/// One embedded migration of a SQL store. Migrations only ever add: a database made by an
/// earlier version upgrades in place, rows kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its version: 1, 2, … in the order they apply.
    pub version: i64,
    /// What it does, in a few words (recorded in the store's ledger).
    pub description: &'static str,
    /// Its SQL, in the store's dialect (a store may write a placeholder for its table prefix
    /// into it, see [`TablePrefix::apply`](super::TablePrefix::apply)).
    pub sql: &'static str,
}
