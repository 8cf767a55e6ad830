from django.urls import path

from relay import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
]
