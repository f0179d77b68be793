-- outbox 0.5.0 -> 0.6.0: outbox_instance keeps the id a worker replaced
-- and how far this server's WAL is that id's history, so that
-- exactly-once's recovery still settles a moved server's last committed
-- Kafka transaction whichever shard replaced the id first
\echo Use "ALTER EXTENSION outbox UPDATE TO '0.6.0'" to load this file. \quit

ALTER TABLE @extschema@.outbox_instance
    ADD COLUMN previous_id uuid,
    ADD COLUMN previous_until pg_lsn;
