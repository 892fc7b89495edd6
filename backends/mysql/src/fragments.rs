//! Pieces of SQL text that several statement builders share (`sql.rs`, `waitlist_sql.rs`,
//! `events.rs`), the binding of a capacity change's terms that their statements share
//! (`kernel.rs`, `pools.rs`), and the prefix the database reserves for its own tables. It
//! imports none of them.

/// MySQL reserves no table prefix
/// ([`TablePrefix::new`](slot_booking::store::TablePrefix::new)).
pub(crate) const RESERVED_PREFIX: Option<&str> = None;

/// The capacity a change gives a slot's or pool's row: `keep * capacity + add`, two
/// parameters ([`CapacityChange::terms`](slot_booking::CapacityChange::terms)).
pub(crate) const CAPACITY_AFTER: &str = "(? * capacity + ?)";

/// The columns [`hold_from_row`](crate::rows::hold_from_row) reads.
pub(crate) const HOLD_COLUMNS: &str =
    "id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity, owner, created_at";

/// `?, ?, …`: `n` placeholders, for a list of ids.
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// Binds a capacity change's statement (`change_capacity`, `change_pool_capacity`): the new
/// capacity's terms ([`CAPACITY_AFTER`](crate::fragments::CAPACITY_AFTER)) for each place
/// `SET` names it, the row's id, the capacity expected twice, then the terms for each later
/// place the `WHERE` names the new capacity (`places` of them).
pub(crate) fn bind_capacity<'q>(
    query: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    change: slot_booking::CapacityChange,
    id: i64,
    places: usize,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let terms = change.terms();
    let mut query = query
        .bind(terms.keep)
        .bind(terms.add)
        .bind(terms.keep)
        .bind(terms.add)
        .bind(id)
        .bind(terms.expected)
        .bind(terms.expected);
    for _ in 0..places {
        query = query.bind(terms.keep).bind(terms.add);
    }
    query
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_counted() {
        assert_eq!(placeholders(1), "?");
        assert_eq!(placeholders(3), "?, ?, ?");
    }
}
