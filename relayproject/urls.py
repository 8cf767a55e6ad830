"""The dashboard's URLs. The accounts pages are listed one by one: the password-reset ones only when mail is
configured ([Mail] Host), see settings.PASSWORD_RESET_ENABLED."""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path

accounts: list[URLPattern | URLResolver] = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password_change/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
]
if settings.PASSWORD_RESET_ENABLED:
    accounts += [
        path("password_reset/", auth_views.PasswordResetView.as_view(), name="password_reset"),
        path("password_reset/done/", auth_views.PasswordResetDoneView.as_view(), name="password_reset_done"),
        path("reset/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(), name="password_reset_confirm"),
        path("reset/done/", auth_views.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
    ]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include(accounts)),
    path("", include("relay.urls")),
]
