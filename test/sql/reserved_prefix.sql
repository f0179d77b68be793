--
-- outbox is a reserved prefix: ALTER SYSTEM refuses a made-up outbox.*
-- setting. How it refuses differs by major, hence two expected outputs:
-- reserved_prefix.out (15: unrecognized, 42704) and reserved_prefix_1.out
-- (17 and 18: an invalid name under a reserved prefix, 42602).
--
ALTER SYSTEM SET outbox.no_such_setting = 1;
\echo :LAST_ERROR_SQLSTATE
-- nothing was written
SELECT count(*) FROM pg_file_settings WHERE name = 'outbox.no_such_setting';
