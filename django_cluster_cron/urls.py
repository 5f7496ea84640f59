"""The app's URLs for operating it from outside.

path("cron/", include("django_cluster_cron.urls"))
"""

from __future__ import annotations

from django.urls import path

from .ops import views

app_name = "django_cluster_cron"

urlpatterns = [
    path("health/", views.health, name="health"),
]
