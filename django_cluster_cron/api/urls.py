"""The API's URLs: ``path("cron/api/", include("django_cluster_cron.api.urls"))``.

jobs/, jobs/<id>/, jobs/<id>/{pause,resume,run,backfill,restore}/
runs/, runs/<id>/, runs/<id>/{retry,cancel,retry-pieces}/, runs/<id>/pieces/
preview/, health/
schema/ (OpenAPI 3, YAML or ?format=json), docs/ (Swagger UI, served from the app: no CDN)
"""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import IsAuthenticated
from rest_framework.routers import DefaultRouter

from . import preview, runs, views

app_name = "cluster_cron_api"

router = DefaultRouter()
# No ".json" suffix routes: an id is whatever stands between two slashes, and a bad one is a JSON
# 404 from the API rather than Django's HTML page.
router.include_format_suffixes = False
router.register("jobs", views.JobViewSet, basename="job")
router.register("runs", runs.RunViewSet, basename="run")


class SchemaView(SpectacularAPIView):
    """The OpenAPI document itself (not an operation of the API it describes); for logged-in
    users, like the Swagger UI that reads it."""

    permission_classes = [IsAuthenticated]  # noqa: RUF012 - DRF reads it from the class

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]


urlpatterns = [
    *router.urls,
    path("preview/", preview.PreviewView.as_view(), name="preview"),
    path("health/", views.HealthView.as_view(), name="health"),
    path(
        "schema/",
        SchemaView.as_view(
            custom_settings={
                "TITLE": "django-cluster-cron",
                "DESCRIPTION": (
                    "Cron jobs in the database, run once per slot as Celery or django.tasks tasks."
                ),
                "VERSION": "1",
                "POSTPROCESSING_HOOKS": [
                    "drf_spectacular.hooks.postprocess_schema_enums",
                    "django_cluster_cron.api.schema.close_state_forms",
                ],
            }
        ),
        name="schema",
    ),
    path(
        "docs/",
        SpectacularSwaggerView.as_view(
            url_name="cluster_cron_api:schema", permission_classes=[IsAuthenticated]
        ),
        name="docs",
    ),
]
