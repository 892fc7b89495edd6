-- The event log, its placement counter and consumers' cursors.
--
-- A write appends its events with `position` NULL, in its own transaction. Auto-increment
-- ids follow neither commit order nor, on a Galera cluster, any order across nodes (each node
-- draws its own stride), so a reader never pages by `seq`. Events are placed instead: a
-- placer locks the one row of `{p}event_log`, gives the committed events not yet placed the
-- positions after `placed`, in `seq` order, and moves `placed` on, in one transaction. An event
-- still uncommitted is not seen (and is skipped, never waited for) and gets a later position
-- once it commits, above every position handed out so far: a consumer that acknowledges as it
-- reads by position skips nothing. Positions are `0_<position>`.

CREATE TABLE IF NOT EXISTS {p}events (
    seq         BIGINT NOT NULL AUTO_INCREMENT,
    position    BIGINT NULL,
    kind        VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    slot_id     BIGINT NOT NULL,
    hold_id     BIGINT NULL,
    owner       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    quantity    INT NOT NULL,
    occurred_at BIGINT NOT NULL,
    PRIMARY KEY (seq),
    -- Readers read by position; events not yet placed (NULL) sort first.
    UNIQUE KEY {p}events_position (position)
) ENGINE = InnoDB;

-- One row: the highest position handed out.
CREATE TABLE IF NOT EXISTS {p}event_log (
    one    TINYINT NOT NULL,
    placed BIGINT NOT NULL,
    PRIMARY KEY (one),
    CONSTRAINT {p}event_log_one CHECK (one = 1)
) ENGINE = InnoDB;

INSERT IGNORE INTO {p}event_log (one, placed) VALUES (1, 0);

-- A consumer's cursor (the last position it acknowledged, only ever moved forward) and its
-- lease (`holder` until `lease_until`, microseconds).
CREATE TABLE IF NOT EXISTS {p}event_consumers (
    name         VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    acknowledged BIGINT NOT NULL,
    holder       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    lease_until  BIGINT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;
