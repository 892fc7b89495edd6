#!/usr/bin/env bash
# Runs the MariaDB/MySQL benchmarks: store and engine against a bare sqlx loop of the same
# statements (8 connections, 1,000 slots) on the single server, on Galera node 1 and spread
# over the three nodes, then the cost of a conflict retry on a hot slot of the cluster.
# The servers: MYSQL_URL (default mysql://root@127.0.0.1:3306) and the cluster of
# `bash .ci/galera start` (or GALERA_URLS); parts whose server is down are skipped.
# An argument picks parts: holds, single, galera, conflicts, statements.
set -euo pipefail
cd "$(dirname "$0")/.."
export MYSQL_URL="${MYSQL_URL:-mysql://root@127.0.0.1:3306}"
echo "load before: $(uptime)"
bash .ci/galera status || echo "(the Galera cluster is not up: its parts will be skipped)"
cargo bench --bench mysql -- "$@"
echo "load after: $(uptime)"
