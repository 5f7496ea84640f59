"""Index operations that leave a large ledger writable while they run: on PostgreSQL the index
is built and dropped CONCURRENTLY (the migration using them is not atomic); InnoDB builds and
drops secondary indexes online anyway, and SQLite has no such choice."""

from __future__ import annotations

from typing import Any

from django.db import migrations


class AddIndexOnline(migrations.AddIndex):
    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.execute(self.index.create_sql(model, schema_editor, concurrently=True))
        return None


class RemoveIndexOnline(migrations.RemoveIndex):
    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = from_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.execute(index.remove_sql(model, schema_editor, concurrently=True))
        return None
