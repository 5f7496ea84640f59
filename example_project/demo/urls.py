from django.urls import path

from demo import views

app_name = "demo"

urlpatterns = [
    path("ping/", views.ping, name="ping"),
]
