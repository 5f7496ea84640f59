from django.http import HttpRequest, JsonResponse
from django.utils import timezone


def ping(request: HttpRequest) -> JsonResponse:
    """A target for the `demo.http_get` task: proves a scheduled job reached the web app."""
    return JsonResponse({"ok": True, "at": timezone.now().isoformat()})
