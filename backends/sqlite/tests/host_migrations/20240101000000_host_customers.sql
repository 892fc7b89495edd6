-- A host application's own migration, applied by sqlx's Migrator (ledger `_sqlx_migrations`).
CREATE TABLE customers (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL
);
