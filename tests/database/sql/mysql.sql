-- The claim (mysql): parameters are the new status, the worker, its pool,
-- the backend's result id, the delivery's token, then the run id, task id, attempt and
-- the claimable statuses.
UPDATE `django_cluster_cron_jobrun`
SET `status` = %s,
    `started_at` = UTC_TIMESTAMP(6),
    `heartbeat_at` = UTC_TIMESTAMP(6),
    `worker` = %s,
    `worker_pool` = %s,
    `backend_result_id` = %s,
    `claim_token` = %s,
    `finished_at` = NULL,
    `duration` = NULL,
    `retry_at` = NULL
WHERE `django_cluster_cron_jobrun`.`id` = %s
  AND `django_cluster_cron_jobrun`.`task_id` = %s
  AND `django_cluster_cron_jobrun`.`attempt` = %s
  AND `django_cluster_cron_jobrun`.`status` IN (%s, %s, %s)
  AND (`django_cluster_cron_jobrun`.`due_at` IS NULL OR `django_cluster_cron_jobrun`.`due_at` <= UTC_TIMESTAMP(6));

-- Then the run with its job (no UPDATE ... RETURNING here).

SELECT `django_cluster_cron_jobrun`.`id`,
    `django_cluster_cron_jobrun`.`job_id`,
    `django_cluster_cron_jobrun`.`scheduled_for`,
    `django_cluster_cron_jobrun`.`due_at`,
    `django_cluster_cron_jobrun`.`status`,
    `django_cluster_cron_jobrun`.`task_id`,
    `django_cluster_cron_jobrun`.`trigger`,
    `django_cluster_cron_jobrun`.`attempt`,
    `django_cluster_cron_jobrun`.`dispatched_by`,
    `django_cluster_cron_jobrun`.`epoch`,
    `django_cluster_cron_jobrun`.`queued_at`,
    `django_cluster_cron_jobrun`.`started_at`,
    `django_cluster_cron_jobrun`.`finished_at`,
    `django_cluster_cron_jobrun`.`duration`,
    `django_cluster_cron_jobrun`.`heartbeat_at`,
    `django_cluster_cron_jobrun`.`retry_at`,
    `django_cluster_cron_jobrun`.`publish_count`,
    `django_cluster_cron_jobrun`.`republish_at`,
    `django_cluster_cron_jobrun`.`worker`,
    `django_cluster_cron_jobrun`.`worker_pool`,
    `django_cluster_cron_jobrun`.`backend_result_id`,
    `django_cluster_cron_jobrun`.`claim_token`,
    `django_cluster_cron_jobrun`.`reason`,
    `django_cluster_cron_jobrun`.`cancel_requested_at`,
    `django_cluster_cron_jobrun`.`cancel_requested_by`,
    `django_cluster_cron_jobrun`.`piece_count`,
    `django_cluster_cron_jobrun`.`kwargs_override`,
    `django_cluster_cron_jobrun`.`result`,
    `django_cluster_cron_jobrun`.`error`,
    `django_cluster_cron_jobrun`.`traceback`,
    `django_cluster_cron_jobrun`.`created_at`,
    `django_cluster_cron_jobrun`.`updated_at`,
    `django_cluster_cron_jobdefinition`.`id`,
    `django_cluster_cron_jobdefinition`.`pieces`,
    `django_cluster_cron_jobdefinition`.`pieces_planner`,
    `django_cluster_cron_jobdefinition`.`max_failed_pieces`,
    `django_cluster_cron_jobdefinition`.`max_parallel_pieces`,
    `django_cluster_cron_jobdefinition`.`pieces_success`,
    `django_cluster_cron_jobdefinition`.`pieces_success_count`,
    `django_cluster_cron_jobdefinition`.`pieces_required`,
    `django_cluster_cron_jobdefinition`.`on_complete`,
    `django_cluster_cron_jobdefinition`.`retention`,
    `django_cluster_cron_jobdefinition`.`keep_last`,
    `django_cluster_cron_jobdefinition`.`name`,
    `django_cluster_cron_jobdefinition`.`description`,
    `django_cluster_cron_jobdefinition`.`cron`,
    `django_cluster_cron_jobdefinition`.`timezone`,
    `django_cluster_cron_jobdefinition`.`exclusions`,
    `django_cluster_cron_jobdefinition`.`task`,
    `django_cluster_cron_jobdefinition`.`args`,
    `django_cluster_cron_jobdefinition`.`kwargs`,
    `django_cluster_cron_jobdefinition`.`enabled`,
    `django_cluster_cron_jobdefinition`.`pause_note`,
    `django_cluster_cron_jobdefinition`.`queue`,
    `django_cluster_cron_jobdefinition`.`priority`,
    `django_cluster_cron_jobdefinition`.`expires`,
    `django_cluster_cron_jobdefinition`.`catchup_policy`,
    `django_cluster_cron_jobdefinition`.`catchup_window`,
    `django_cluster_cron_jobdefinition`.`overlap_policy`,
    `django_cluster_cron_jobdefinition`.`max_buffered`,
    `django_cluster_cron_jobdefinition`.`max_retries`,
    `django_cluster_cron_jobdefinition`.`retry_backoff`,
    `django_cluster_cron_jobdefinition`.`retry_backoff_max`,
    `django_cluster_cron_jobdefinition`.`on_worker_lost`,
    `django_cluster_cron_jobdefinition`.`on_uncertain`,
    `django_cluster_cron_jobdefinition`.`cancel_interrupts`,
    `django_cluster_cron_jobdefinition`.`cancel_grace`,
    `django_cluster_cron_jobdefinition`.`soft_time_limit`,
    `django_cluster_cron_jobdefinition`.`time_limit`,
    `django_cluster_cron_jobdefinition`.`start_at`,
    `django_cluster_cron_jobdefinition`.`end_at`,
    `django_cluster_cron_jobdefinition`.`max_runs`,
    `django_cluster_cron_jobdefinition`.`jitter`,
    `django_cluster_cron_jobdefinition`.`pause_after_failures`,
    `django_cluster_cron_jobdefinition`.`scheduled_runs`,
    `django_cluster_cron_jobdefinition`.`consecutive_failures`,
    `django_cluster_cron_jobdefinition`.`next_run_at`,
    `django_cluster_cron_jobdefinition`.`last_scheduled_at`,
    `django_cluster_cron_jobdefinition`.`created_at`,
    `django_cluster_cron_jobdefinition`.`updated_at`,
    `django_cluster_cron_jobdefinition`.`deleted_at`,
    `django_cluster_cron_jobdefinition`.`source`,
    `django_cluster_cron_jobdefinition`.`code_origin`,
    `django_cluster_cron_jobdefinition`.`deletion_id`
FROM `django_cluster_cron_jobrun`
INNER JOIN `django_cluster_cron_jobdefinition`
ON (`django_cluster_cron_jobdefinition`.`id` = `django_cluster_cron_jobrun`.`job_id`)
WHERE `django_cluster_cron_jobrun`.`id` = %s;

-- The final record: success.
UPDATE `django_cluster_cron_jobrun`
SET `status` = %s,
    `result` = %s,
    `error` = %s,
    `duration` = %s,
    `finished_at` = UTC_TIMESTAMP(6)
WHERE `django_cluster_cron_jobrun`.`id` = %s
  AND `django_cluster_cron_jobrun`.`attempt` = %s
  AND `django_cluster_cron_jobrun`.`status` = %s
  AND `django_cluster_cron_jobrun`.`cancel_requested_at` IS NULL;

-- The final record: failed.
UPDATE `django_cluster_cron_jobrun`
SET `status` = %s,
    `error` = %s,
    `traceback` = %s,
    `duration` = %s,
    `finished_at` = UTC_TIMESTAMP(6)
WHERE `django_cluster_cron_jobrun`.`id` = %s
  AND `django_cluster_cron_jobrun`.`attempt` = %s
  AND `django_cluster_cron_jobrun`.`status` = %s
  AND `django_cluster_cron_jobrun`.`cancel_requested_at` IS NULL;

-- The final record: retrying.
UPDATE `django_cluster_cron_jobrun`
SET `status` = %s,
    `attempt` = %s,
    `retry_at` = %s,
    `republish_at` = %s,
    `error` = %s,
    `traceback` = %s,
    `duration` = %s,
    `finished_at` = UTC_TIMESTAMP(6)
WHERE `django_cluster_cron_jobrun`.`id` = %s
  AND `django_cluster_cron_jobrun`.`attempt` = %s
  AND `django_cluster_cron_jobrun`.`status` = %s
  AND `django_cluster_cron_jobrun`.`cancel_requested_at` IS NULL;

-- The final record: skipped.
UPDATE `django_cluster_cron_jobrun`
SET `status` = %s,
    `reason` = %s,
    `duration` = %s,
    `finished_at` = UTC_TIMESTAMP(6)
WHERE `django_cluster_cron_jobrun`.`id` = %s
  AND `django_cluster_cron_jobrun`.`attempt` = %s
  AND `django_cluster_cron_jobrun`.`status` = %s
  AND `django_cluster_cron_jobrun`.`cancel_requested_at` IS NULL;

-- The final record: missed.
UPDATE `django_cluster_cron_jobrun`
SET `status` = %s,
    `reason` = %s,
    `started_at` = %s,
    `heartbeat_at` = %s,
    `duration` = %s,
    `finished_at` = UTC_TIMESTAMP(6)
WHERE `django_cluster_cron_jobrun`.`id` = %s
  AND `django_cluster_cron_jobrun`.`attempt` = %s
  AND `django_cluster_cron_jobrun`.`status` = %s
  AND `django_cluster_cron_jobrun`.`cancel_requested_at` IS NULL;

-- The final record: cancelled (stopped).
UPDATE `django_cluster_cron_jobrun`
SET `status` = %s,
    `error` = %s,
    `traceback` = %s,
    `duration` = %s,
    `finished_at` = UTC_TIMESTAMP(6)
WHERE `django_cluster_cron_jobrun`.`id` = %s
  AND `django_cluster_cron_jobrun`.`attempt` = %s
  AND `django_cluster_cron_jobrun`.`status` IN (%s, %s);

-- The heartbeat of two runs with no cancel asked for.
UPDATE `django_cluster_cron_jobrun`
SET `heartbeat_at` = UTC_TIMESTAMP(6)
WHERE `status` IN ('running', 'terminating')
  AND ((`id` = %s
  AND `attempt` = %s) OR (`id` = %s
  AND `attempt` = %s))
  AND `cancel_requested_at` IS NULL;

-- Only when it stamped fewer: which have a cancel asked for (then stamped).
SELECT `id`,
    `cancel_requested_by`
FROM `django_cluster_cron_jobrun`
WHERE `status` IN ('running', 'terminating')
  AND `cancel_requested_at` IS NOT NULL
  AND ((`id` = %s
  AND `attempt` = %s) OR (`id` = %s
  AND `attempt` = %s));
