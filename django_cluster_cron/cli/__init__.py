"""The operator's terminal: ``manage.py cron <verb>``, thin over the operator actions.

Each verb is a function of its parsed options that returns a :class:`~.common.Reply` (what it
prints for a person, and the stable shape ``--json`` prints) or raises
:class:`~.common.Refused` (exit 1, the reason on stderr). The rules are the ones the admin and the
API apply: the model's validation, :mod:`django_cluster_cron.actions` for runs, the job's own
``pause``/``resume``; no verb decides anything of its own. What a verb changes is written to the
job's audit trail under ``--by`` (by default the OS user and host).

``reading`` holds the verbs that only read (list, describe, next, runs), ``acting`` those that
act on runs and jobs (trigger, pause, resume, retry, cancel), and ``common`` what they share.
"""
