"""Refusals look like the product, and say why."""


def test_an_outsider_gets_a_friendly_404(client_for, project):
    response = client_for("eve").get(f"/p/{project.slug}/")
    assert response.status_code == 404
    assert "nothing you have access to" in response.content.decode()


def test_a_viewer_is_told_why_a_page_is_forbidden(client_for, project):
    response = client_for("dave").get(f"/p/{project.slug}/runs/new/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "Not allowed" in page and "viewer" in page
