--
-- altered_table: outbox_send() on an outbox its owner altered. Columns
-- renamed (the workers read them by name) are refused with 55000; what an
-- INSERT statement would honour (a NOT NULL, a partition's constraint,
-- row and statement triggers with their transition table) is honoured.
-- Every change is undone (or rolled back) before the next.
--
\set SHOW_CONTEXT never
-- a constraint's message would show the row (its id and time vary)
\set VERBOSITY terse

CREATE EXTENSION outbox;
SELECT outbox_send('before', 'x'::text, 'k') > 0 AS sent;

--
-- A column renamed: refused, naming the table and the column.
--
ALTER TABLE outbox RENAME COLUMN topic TO t;
SELECT outbox_send('renamed', 'x'::text, 'k');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE outbox RENAME COLUMN t TO topic;
SELECT outbox_send('renamed-back', 'x'::text, 'k') > 0 AS sent;

-- two text columns swapping names: the types still match, the names do not
BEGIN;
ALTER TABLE outbox RENAME COLUMN topic TO tmp;
ALTER TABLE outbox RENAME COLUMN last_error TO topic;
ALTER TABLE outbox RENAME COLUMN tmp TO last_error;
SELECT outbox_send('swapped', 'x'::text, 'k');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

--
-- A NOT NULL the owner adds holds for outbox_send() as for an INSERT.
--
BEGIN;
ALTER TABLE outbox ALTER COLUMN key SET NOT NULL;
SELECT outbox_send('keyed', 'x'::text, 'k') > 0 AS sent;
SELECT outbox_send('keyless', 'x'::text);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT outbox_send('keyless', 'x'::text) > 0 AS sent_after_rollback;

--
-- The outbox as a partition: its partition constraint holds (ids below
-- the next one only, so the next event is outside it).
--
SELECT max(id) + 1 AS next_id FROM outbox \gset
BEGIN;
CREATE TABLE outbox_parent (LIKE outbox) PARTITION BY RANGE (id);
ALTER TABLE outbox_parent ATTACH PARTITION outbox FOR VALUES FROM (MINVALUE) TO (:next_id);
SELECT outbox_send('partitioned', 'x'::text, 'k');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

--
-- Another table access method (here the heap's handler under another
-- name): the row goes in through the access method.
--
BEGIN;
CREATE ACCESS METHOD heap_under_another_name TYPE TABLE HANDLER heap_tableam_handler;
ALTER TABLE outbox SET ACCESS METHOD heap_under_another_name;
SELECT outbox_send('other_am', 'x'::text, 'k') AS other_am_id \gset
SELECT topic, convert_from(payload, 'UTF8') AS payload FROM outbox WHERE id = :other_am_id;
ROLLBACK;

--
-- An AFTER ROW trigger runs once per event, and leaves no reference to
-- the table behind (no WARNING at the end of the transaction).
--
CREATE FUNCTION outbox_row_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE '% % row: topic %', TG_WHEN, TG_OP, NEW.topic;
    RETURN NULL;
END
$$;
CREATE TRIGGER row_seen AFTER INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_row_seen();
SELECT outbox_send('row-trigger', 'x'::text, 'k') > 0 AS sent;
SELECT count(*) AS sent FROM (SELECT outbox_send('row-trigger-' || i, 'x'::text) FROM generate_series(1, 3) i) s;
DROP TRIGGER row_seen ON outbox;

--
-- Statement triggers: each outbox_send() is a one-row INSERT statement,
-- BEFORE and AFTER STATEMENT triggers around it, and its transition table
-- holds its row.
--
CREATE FUNCTION outbox_statement_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_WHEN = 'AFTER' THEN
        RAISE NOTICE '% % statement: new rows %', TG_WHEN, TG_OP,
            (SELECT string_agg(topic || '/' || convert_from(payload, 'UTF8'), ', ' ORDER BY id) FROM new_rows);
    ELSE
        RAISE NOTICE '% % statement', TG_WHEN, TG_OP;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER before_statement BEFORE INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_statement_seen();
CREATE TRIGGER after_statement AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_statement_seen();
SELECT outbox_send('statement-trigger', 'one'::text, 'k') > 0 AS sent;
BEGIN;
SELECT outbox_send('statement-trigger', 'two'::text, 'k') > 0 AS sent;
SELECT outbox_send('statement-trigger', 'three'::text) > 0 AS sent;
COMMIT;
DROP TRIGGER before_statement ON outbox;
DROP TRIGGER after_statement ON outbox;

-- the rows of all of the above, in order
SELECT topic, key IS NOT NULL AS keyed, convert_from(payload, 'UTF8') AS payload
FROM outbox ORDER BY id;

DROP FUNCTION outbox_row_seen();
DROP FUNCTION outbox_statement_seen();
DROP EXTENSION outbox;
