-- A park is a snooze (wave 5, shape round three). A workflow's sleep, and a wait for an event with
-- a timeout, end their attempt the way a retry's backoff does: the job goes `pending` with run_at at
-- the sleep's end (or the wait's timeout), its lock cleared and its attempt refunded, in the
-- statement that records the step. The claim at that time re-enters the run, and the step completes
-- then. An event makes the runs waiting on it due (run_at = now()); a wait without a timeout stays
-- `waiting` until its event; a child's wait keeps the `after` machinery. So nothing wakes workflows
-- any more: pgdrain.wake_workflows() and the index of wake times it read are gone, and every
-- "next due" is the next run_at.
DROP INDEX "pgdrain"."workflow_steps_wake";
--> statement-breakpoint
-- An older signature of pgdrain.wake_workflows() was dropped here; migrate drops every function no file of src/sql/functions defines.
--> statement-breakpoint
-- Runs parked by an older version: a sleep or a timed wait becomes pending until its end.
UPDATE pgdrain.jobs j SET status = 'pending', run_at = s.wake_at, waiting_for = NULL
  FROM pgdrain.workflow_steps s
 WHERE j.status = 'waiting' AND s.job_id = j.id AND s.status IN ('sleeping', 'waiting') AND s.wake_at IS NOT NULL;
--> statement-breakpoint
-- pgdrain.park_sleep() was (re)defined here; its live text is src/sql/functions/park_sleep.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.park_wait() was (re)defined here; its live text is src/sql/functions/park_wait.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.send_event() was (re)defined here; its live text is src/sql/functions/send_event.sql, applied by migrate after the migrations.
