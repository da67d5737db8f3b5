-- pgdrain: online
-- The end of each running job's lease, written by its claim and every renewal from the lease its
-- drainer holds, so that every reaper applies that lease and none of its own. Online: a nullable
-- column without a default is a change to the catalog only (its lock is held for a moment, taken
-- under a short lock_timeout and retried); running jobs locked by drainers older than this column
-- keep a NULL lease end and are reaped by the reaper's own timeout, as before.
ALTER TABLE "pgdrain"."jobs" ADD COLUMN IF NOT EXISTS "locked_until" timestamp with time zone;
