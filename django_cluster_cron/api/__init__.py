"""The REST API (optional extra ``api``: Django REST framework and drf-spectacular).

Mount it with one ``include()``; the OpenAPI 3 schema and an offline Swagger UI come with it::

    path("cron/api/", include("django_cluster_cron.api.urls")),

Authentication is whatever the project's ``REST_FRAMEWORK`` settings say; permissions are the
Django model permissions the admin uses. See docs/reference/api.md.
"""
