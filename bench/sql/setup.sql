-- Objects the benchmark creates in its database besides the extension:
-- the baselines' plain table, and the procedures that wait for and time
-- drains inside the server (a client loop would add its own latency).

CREATE SEQUENCE plain_id_seq NO CYCLE;
-- the outbox's own shape (columns, defaults, primary key and indexes),
-- taken from the installed table, for the enqueue and drain baselines
CREATE TABLE plain (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS
                    INCLUDING INDEXES INCLUDING STORAGE);

-- Polls until every shard is empty, committing between polls so that it
-- holds no snapshot. Per shard it keeps the lowest id still there: the
-- workers delete in id order and nothing is added while it waits, so an
-- index probe from there replaces a scan over the dead rows.
CREATE PROCEDURE bench_wait_empty(t0 float8, timeout_s float8, nshards int,
                                  INOUT elapsed float8 DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    low bigint[] := array_fill(0::bigint, ARRAY[nshards]);
    m bigint;
    busy bool;
BEGIN
    LOOP
        busy := false;
        FOR s IN 0 .. nshards - 1 LOOP
            SELECT min(id) INTO m FROM outbox WHERE shard = s AND id >= low[s + 1];
            IF m IS NOT NULL THEN
                low[s + 1] := m;
                busy := true;
                EXIT;
            END IF;
        END LOOP;
        elapsed := extract(epoch from clock_timestamp()) - t0;
        EXIT WHEN NOT busy;
        IF elapsed > timeout_s THEN
            RAISE EXCEPTION 'outbox not empty after % s', timeout_s;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.02);
    END LOOP;
END $$;

-- Baseline: the same batches a worker reads and deletes, without Kafka.
CREATE PROCEDURE bench_plain_drain(batch int, INOUT elapsed float8 DEFAULT NULL,
                                   INOUT total bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    cursor_id bigint := 0;
    ids bigint[];
    bytes bigint;
BEGIN
    total := 0;
    LOOP
        SELECT array_agg(id ORDER BY id), sum(length(payload) + length(topic) + coalesce(length(key), 0))
          INTO ids, bytes
          FROM (SELECT id, topic, key, payload, headers, created_at FROM plain
                 WHERE shard = 0 AND id >= cursor_id
                   AND (next_attempt_at IS NULL OR next_attempt_at <= now())
                 ORDER BY id LIMIT batch) b;
        EXIT WHEN ids IS NULL;
        DELETE FROM plain WHERE shard = 0 AND id = ANY (ids);
        total := total + cardinality(ids);
        cursor_id := ids[cardinality(ids)] + 1;
        COMMIT;
    END LOOP;
    elapsed := extract(epoch from clock_timestamp() - t0);
END $$;
