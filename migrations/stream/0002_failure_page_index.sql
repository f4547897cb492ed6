-- The failure list's order (a group's rows of one status, newest update first, ties by id
-- descending), so that a page of failures() or the dashboard reads its rows from the index after a
-- keyset cursor instead of sorting every matching row (docs/guide/operations.md#failures).
CREATE INDEX IF NOT EXISTS exception_queue_{{N}}_page
  ON {{schema}}.exception_queue_{{N}} (consumer_group_id, status, updated_at DESC, message_id DESC);
