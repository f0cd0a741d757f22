-- 008_step: the drain's step write pays for neither job trigger.
--
-- {s} is the store's schema, quoted.
--
-- A drain write that stores a target and starts the next one of a running
-- job (every target but a job's last) is a statement of its own that names
-- only the columns a step changes (see step in sql.go). PostgreSQL
-- considers a column-specific trigger only for a statement whose SET list
-- names one of its columns, and only then reads and evaluates its WHEN
-- clause, which it does once per statement: so a step write pays nothing
-- for job_webhook (status, runner). job_caller_bytes_update named bytes as
-- well, which every step sets; it now names runner alone. That covers every
-- change of a job's share (its bytes while no runner holds it): a step
-- changes the bytes of a held job only, and every statement that releases
-- a job, or could change a released job's bytes, names runner (the drain's
-- final write and the reap do). A statement added later that changes a
-- released job's bytes must name runner too.

DROP TRIGGER job_caller_bytes_update ON {s}.job;
CREATE TRIGGER job_caller_bytes_update AFTER UPDATE OF runner ON {s}.job FOR EACH ROW
	WHEN ((CASE WHEN NEW.runner = '' THEN NEW.bytes ELSE 0 END) <> (CASE WHEN OLD.runner = '' THEN OLD.bytes ELSE 0 END))
	EXECUTE FUNCTION {s}.job_caller_bytes();
