"""A module of the test project that nothing imports: a job synced from an ``@cron`` here once is
one the sync cannot tell was removed when this module is not read (tests/database/
test_declared_newcomer.py)."""
