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
