# The ledger's newest-first index becomes ascending (read backwards): on MySQL/MariaDB the id that
# InnoDB appends to a descending index runs the other way, so the lists' ORDER BY slot DESC, id
# DESC could not use it and sorted every run. The new index is built before the old one goes.

from django.db import migrations, models

from ._online import AddIndexOnline, RemoveIndexOnline


class Migration(migrations.Migration):
    # CONCURRENTLY (PostgreSQL) cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("django_cluster_cron", "0023_run_kwargs_override"),
    ]

    operations = [
        AddIndexOnline(
            model_name="jobrun",
            index=models.Index(fields=["scheduled_for"], name="cluster_cron_run_slot"),
        ),
        RemoveIndexOnline(
            model_name="jobrun",
            name="cluster_cron_run_recent",
        ),
    ]
