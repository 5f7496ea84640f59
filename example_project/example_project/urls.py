from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("demo/", include("demo.urls")),
    # GET /cron/health/: the cluster's health as JSON (200 healthy, 503 not).
    path("cron/", include("django_cluster_cron.urls")),
    # The REST API; its Swagger UI at /cron/api/docs/.
    path("cron/api/", include("django_cluster_cron.api.urls")),
]
