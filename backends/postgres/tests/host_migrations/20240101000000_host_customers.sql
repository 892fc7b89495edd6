-- A host application's own migration, applied by sqlx's Migrator (ledger `_sqlx_migrations`).
-- It even has a table named like one of ours, in its own schema.
CREATE TABLE customers (
    id   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT NOT NULL
);
CREATE TABLE slots (
    id    BIGINT PRIMARY KEY,
    label TEXT NOT NULL
);
