from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from agentos import passkey_screen, security_screen, tools_screen, views
from agentos.api import api, unknown_endpoint
from approvals import urls as approvals_urls
from cluster import views as cluster_views
from memory import urls as memory_urls
from missions import agents_views, killswitch
from missions import urls as missions_urls

console = (
    [
        path("", views.home, name="home"),
        path("login/", views.login_view, name="login"),
        path("logout/", views.logout_view, name="logout"),
        path("more/", views.more, name="more"),
        path("settings/", views.settings_view, name="settings"),
        path("settings/tokens/<int:token_id>/revoke", views.revoke_token_view, name="revoke-token"),
        path(
            "settings/sessions/sign-out-others",
            security_screen.sign_out_others,
            name="sign-out-others",
        ),
        path(
            "settings/authenticators/add",
            security_screen.add_authenticator,
            name="authenticator-add",
        ),
        path(
            "settings/authenticators/<int:device_id>/confirm",
            security_screen.confirm_authenticator,
            name="authenticator-confirm",
        ),
        path(
            "settings/authenticators/<int:device_id>/cancel",
            security_screen.cancel_authenticator,
            name="authenticator-cancel",
        ),
        path(
            "settings/authenticators/<int:device_id>/remove",
            security_screen.remove_authenticator,
            name="authenticator-remove",
        ),
        path(
            "settings/backup-codes", security_screen.renew_backup_codes, name="backup-codes-renew"
        ),
        path("login/passkey", passkey_screen.sign_in_options, name="passkey-sign-in-options"),
        path(
            "settings/passkeys/options",
            passkey_screen.enrolment_options,
            name="passkey-enrolment-options",
        ),
        path("settings/passkeys/add", passkey_screen.add, name="passkey-add"),
        path(
            "settings/passkeys/<int:device_id>/remove",
            passkey_screen.remove,
            name="passkey-remove",
        ),
        path("settings/push/subscribe", security_screen.subscribe, name="push-subscribe"),
        path("settings/push/unsubscribe", security_screen.unsubscribe, name="push-unsubscribe"),
        path("settings/push/test", security_screen.test_notification, name="push-test"),
        path("settings/push/sender", security_screen.push_sender_contact, name="push-sender"),
        path("offline/", views.offline, name="offline"),
        path("stop-everything/", killswitch.kill_switch, name="kill-switch"),
        path("agents/", agents_views.agents_screen, name="agents"),
        path("tools/", tools_screen.tools_screen, name="tools"),
        path("tools/mcp/", tools_screen.add_mcp_server, name="tool-mcp-add"),
        path(
            "tools/mcp/<str:name>/approve",
            tools_screen.approve_mcp_server,
            name="tool-mcp-approve",
        ),
        path("cluster/", cluster_views.cluster_screen, name="cluster"),
        path("tools/rules/<int:rule_id>/delete", tools_screen.delete_rule, name="tool-rule-delete"),
        *approvals_urls.urlpatterns,
        *missions_urls.urlpatterns,
        *memory_urls.urlpatterns,
        path("manifest.webmanifest", views.manifest, name="manifest"),
        path("sw.js", views.service_worker, name="service-worker"),
    ],
    "console",
)

# Django's own error pages are bare HTML 980 px wide on a phone; ours are in the console's shell,
# and JSON under /api/v1.
handler400 = "agentos.errorpages.bad_request"
handler403 = "agentos.errorpages.permission_denied"
handler404 = "agentos.errorpages.not_found"
handler500 = "agentos.errorpages.server_error"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("api/v1/<path:rest>", unknown_endpoint),
    path("", include(console)),
]
