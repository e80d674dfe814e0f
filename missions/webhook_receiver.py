"""Where outsiders deliver webhooks: POST /hooks/<key>, outside the token API on purpose.

No session, no token, no CSRF: the signature is the authentication (`missions.webhooks`). The
body is read raw (what was signed), at most `webhooks.MAX_BODY` bytes; answers are JSON in the
API's error shape. A sender learns whether its delivery became a mission, never the owner's
reason why not (that is on the owner's screen, with a Replay button).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from missions import webhooks
from missions.models import Webhook


def _error(status: int, code: str, message: str, **details: Any) -> JsonResponse:
    # The API's error shape, `details` always present (null when there is nothing more).
    body = {"code": code, "message": message, "details": details or None}
    return JsonResponse({"error": body}, status=status)


@csrf_exempt  # the signature authenticates; there is no session to protect here
def receive(request: HttpRequest, key: str) -> JsonResponse:
    """1. POST only (405); 2. a known endpoint (404); 3. a body within the limit (413), read
    raw; 4. a good signature (401); 5. stored, and a mission started: 202 with its id, 200 for a
    repeated delivery, 503 when the mission could not start (stored as failed, replayable)."""
    if request.method != "POST":
        answer = _error(
            405, "method_not_allowed", f"{request.method} is not allowed here; use POST."
        )
        answer["Allow"] = "POST"
        return answer
    webhook = Webhook.objects.filter(key=key).first()
    if webhook is None:
        return _error(404, "not_found", "No such webhook.")
    too_large = _error(
        413,
        "body_too_large",
        f"A delivery's body is at most {webhooks.MAX_BODY} bytes.",
        limit_bytes=webhooks.MAX_BODY,
    )
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        return _error(400, "bad_request", "The Content-Length header is not a number.")
    if declared > webhooks.MAX_BODY:
        return too_large
    # Read past the limit by one byte: a body without a length is refused as surely.
    body = request.read(webhooks.MAX_BODY + 1)
    if len(body) > webhooks.MAX_BODY:
        return too_large
    headers = request.headers  # case-insensitive: GitHub spells X-GitHub-Delivery
    try:
        signature = webhooks.verify(webhook, headers=headers, body=body)
        outcome = webhooks.receive(webhook, headers=headers, body=body, signature=signature)
    except webhooks.WebhookError as refused:
        return _error(refused.status, refused.code, refused.message)
    delivery = outcome.delivery
    if outcome.failure is not None:
        return _error(
            503,
            "mission_not_started",
            "The delivery is stored, but its mission could not start now; the owner sees why"
            " and can replay it. Sending it again with the same delivery id retries it.",
            delivery_id=delivery.delivery_id,
            reason=outcome.failure.code,
        )
    return JsonResponse(
        {
            "mission_id": delivery.mission_id,
            "delivery_id": delivery.delivery_id,
            "duplicate": outcome.duplicate,
        },
        status=200 if outcome.duplicate else 202,
    )
