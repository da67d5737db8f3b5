-- An event's id from its sender (wave 6): a repeat of the same event name and id, while the first
-- is kept, is dropped by pgdrain.send_event(). A nullable column (no rewrite) and an index over the
-- events kept (the retention window), on a table the housekeeping round keeps small.
ALTER TABLE "pgdrain"."events" ADD COLUMN "sender_id" text;--> statement-breakpoint
CREATE UNIQUE INDEX "events_sender_id" ON "pgdrain"."events" USING btree ("event","sender_id") WHERE sender_id IS NOT NULL;