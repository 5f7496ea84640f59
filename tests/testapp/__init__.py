"""A Django app that exists only for the test suite: a Celery app and a few tasks."""
