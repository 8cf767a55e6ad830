from django.contrib.staticfiles.views import serve as serve_static
from django.urls import path, re_path
from django.views.generic import RedirectView

from relay.web import api, metrics, views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("clients/", views.clients, name="clients"),
    path("clients/<int:client_id>/", views.client_detail, name="client-detail"),
    path("usage/", views.usage, name="usage"),
    path("schema/", views.schema, name="schema"),
    path("api/overview", api.overview, name="api-overview"),
    path("api/clients", api.clients, name="api-clients"),
    path("api/clients/<int:client_id>", api.client_detail, name="api-client-detail"),
    path("api/usage", api.usage, name="api-usage"),
    path("api/schema", api.schema, name="api-schema"),
    path("metrics", metrics.metrics, name="metrics"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", RedirectView.as_view(url="/static/relay/favicon.svg", permanent=True)),
    # The dashboard's few static files, served by Django itself so that `gunicorn relayproject.wsgi` needs no web
    # server in front (staticfiles refuses to serve without DEBUG unless told it is meant).
    re_path(r"^static/(?P<path>.*)$", serve_static, {"insecure": True}),
]
