"""What every page carries: the favicon (linked, and /favicon.ico answered instead of a 404), the
shared script (nav menu, theme toggle, confirm dialogs, the `?` shortcut sheet) and its theme script in
<head>."""

from __future__ import annotations

from django.contrib.staticfiles import finders


def test_favicon_ico_is_answered_and_the_icon_exists(client, db):
    response = client.get("/favicon.ico")

    assert response.status_code == 301
    assert response["Location"].endswith("img/favicon.ico")
    assert finders.find("img/favicon.ico") and finders.find("img/favicon.svg")


def test_every_page_links_the_icon_and_carries_the_shortcut_sheet(client, db):
    html = client.get("/accounts/login/").content.decode()

    assert 'rel="icon"' in html and "img/favicon.svg" in html
    head = html.split("</head>")[0]
    assert "js/theme.js" in head and "js/site.js" in head
    assert "data-shortcuts" in html and "data-confirm-dialog" in html and "data-theme-toggle" in html
    assert "Accounts are made through invitations" in html
