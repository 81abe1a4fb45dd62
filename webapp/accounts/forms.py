from __future__ import annotations

from django import forms


class ApiTokenForm(forms.Form):
    name = forms.CharField(
        max_length=80, required=False, help_text="What the token is for, e.g. “laptop script”."
    )
