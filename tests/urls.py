from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("cron/", include("django_cluster_cron.urls")),
    path("cron/api/", include("django_cluster_cron.api.urls")),
]
