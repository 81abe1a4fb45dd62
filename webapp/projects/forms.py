from __future__ import annotations

from django import forms

from webapp.projects.models import Role


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=120, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class InvitationForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices, initial=Role.ANNOTATOR)
    note = forms.CharField(
        max_length=120,
        required=False,
        label="For",
        help_text="Who it is for, e.g. “Dana”. Only members see it.",
    )
    days = forms.IntegerField(
        min_value=1, max_value=30, initial=7, label="Expires after (days)", help_text="Between 1 and 30."
    )


class SecretForm(forms.Form):
    name = forms.CharField(
        max_length=64, help_text="Letters, digits and _, e.g. JUDGE_API_KEY: what a judge's “API key” names."
    )
    value = forms.CharField(
        widget=forms.PasswordInput(attrs={"autocomplete": "off"}),
        max_length=10_000,
        help_text="Stored encrypted; never shown again. Saving a name that exists replaces its value.",
    )


class SignUpForm(forms.Form):
    username = forms.CharField(max_length=150)
    password = forms.CharField(widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))
    password_again = forms.CharField(
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}), label="Password, again"
    )

    def clean(self):
        data = super().clean()
        if data.get("password") and data.get("password") != data.get("password_again"):
            self.add_error("password_again", "The two passwords differ.")
        return data
