"""The run ledger: the life of a ``JobRun``, from the row that records a slot to its fate.

Everyone who touches a run does it through here — the leader, the workers, the operators'
actions, the API and the admin — so each rule about runs is written once:

* :mod:`.rows` — making run rows: an operator's run, a batch's compact rows, the overlap policy
  at recording time, the reason a slot was missed;
* :mod:`.fence` — the leader's fenced transactions (epoch and token) that keep a stale leader's
  writes out;
* :mod:`.outbox` — the rows are the outbox: what a message of a run holds, marking runs
  published, what must be sent (again), the oldest run waiting;
* :mod:`.statements` — the worker's claim (exactly one delivery wins) and final record, compiled
  once per connection (:mod:`.cursors`: the cursors they run on, prepared on PostgreSQL);
* :mod:`.transitions` — every move of a run as a named function: the worker's endings, lost
  runs, runs terminated past their cancel grace, an operator's retry and cancel (of a waiting
  run, or the request that asks a running one to stop), messages an execution system dropped;
  the next attempt;
* :mod:`.heartbeats` — a worker's one statement per beat, which also brings back the cancels;
* :mod:`.buffer` — runs an overlap policy holds back (``buffered``), released in slot order,
  and what a preempting slot does to the runs ahead of it;
* :mod:`.states` — the state table: who moves a run out of each state, through which function;
* :mod:`.late`, :mod:`.uncertain` — runs found never sent after their time; slots a lossy
  failover left in doubt;
* :mod:`.failures` — a job paused after too many failed runs in a row.

Withdrawing runs recorded ahead when their job changes is the job's save
(``JobRun.objects.withdraw_recorded_ahead``). The statuses and their groups are in
:mod:`django_cluster_cron.models.runs`; the life of a run, step by step, is drawn in
docs/explanation/architecture.md.
"""
