"""Sign in / out (Django's auth views) and the API tokens page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from webapp.accounts import services, throttle
from webapp.accounts.forms import ApiTokenForm
from webapp.accounts.models import ApiToken

# The raw value of a token just created waits in the session for the next page view, which shows it
# once and forgets it: a reload after the redirect does not create a second token.
NEW_TOKEN_SESSION_KEY = "new_api_token"


class LoginView(auth_views.LoginView):
    template_name = "accounts/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        # Refused before the password is looked at (`webapp.accounts.throttle`): 429, and the page says why.
        refusal = throttle.throttled(request, request.POST.get("username"))
        if refusal is None:
            return super().post(request, *args, **kwargs)
        form = self.get_form_class()(request, initial={"username": request.POST.get("username", "")})
        response = self.render_to_response(self.get_context_data(form=form, throttled=refusal.message))
        response.status_code = 429
        response["Retry-After"] = str(refusal.retry_after_s)
        return response


class LogoutView(auth_views.LogoutView):
    """POST only (Django's default): a link or an image tag cannot sign anyone out."""


@never_cache  # the page shows a new token's value: no cache may keep it
@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            token, raw = services.api_token_create(user=request.user, name=form.cleaned_data["name"])
        except ValidationError as error:
            form.add_error("name", error.message_dict.get("name", error.messages))
        else:
            request.session[NEW_TOKEN_SESSION_KEY] = {"id": token.pk, "name": token.name, "raw": raw}
            return redirect("accounts:tokens")
    new_token = request.session.pop(NEW_TOKEN_SESSION_KEY, None) if request.method == "GET" else None
    return render(
        request,
        "accounts/tokens.html",
        {"form": form, "tokens": ApiToken.objects.filter(user=request.user), "new_token": new_token},
    )


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        services.api_token_revoke(user=request.user, token_id=token_id)
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
    else:
        messages.success(request, "Token revoked: scripts using it are refused from now on.")
    return redirect("accounts:tokens")
