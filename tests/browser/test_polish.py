"""What every page shares, in real headless Chromium: no horizontal page overflow on a 390 px phone
(the nav folds into a menu, wide tables scroll inside their card), dark mode from prefers-color-scheme
with a toggle that is remembered (drawn charts follow it live), a favicon (no favicon.ico 404), and `?` showing the keyboard shortcuts
— each on the main pages."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page, sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import make_trajectory, turn
from tests.webapp.review_factories import make_group
from webapp.experiments.models import Run, RunStatus
from webapp.review import services as review_services
from webapp.rollouts.ingest import insert_metrics

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(420)]

PHONE = {"width": 390, "height": 844}
LONG_WORD = "x" * 300  # a long unbroken model output must not widen the page


@pytest.fixture
def world(project, environment, rubric, run, users):
    for group in range(3):
        make_group(run, group=group, rewards=[1.0, 0.0], prompt=f"What is {group} + 2? {LONG_WORD}")
    trajectory = make_trajectory(
        run,
        step=2,
        reward=1.0,
        components=[
            {"name": "tagged", "kind": "regex", "raw": 1, "weight": 1, "weighted": 1, "explanation": "ok"}
        ],
        turns=[
            turn("system", "You add numbers. " * 40),
            turn("user", f"What is 12 + 30? {LONG_WORD}"),
            turn("assistant", "", tool_name="calc", tool_args={"expression": "12 + 30"}),
            turn("tool", "42", tool_name="calc", tool_result="42"),
            turn("assistant", "<answer>42</answer>"),
        ],
    )
    insert_metrics(run.pk, [(step, None, None, {"reward/mean": 0.2 * step}) for step in range(1, 4)])
    run.checkpoints.create(step=2, path="/tmp/ckpt-2", metrics={"reward/mean": 0.4})
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, current_step=3)
    queue = review_services.queue_create(
        project=project, user=users["alice"], name="style", runs=[run], annotators=[users["alice"]]
    )
    return {"run": run, "trajectory": trajectory, "queue": queue}


def main_pages(project, world) -> dict[str, str]:
    p, run = f"/p/{project.slug}", world["run"]
    return {
        "projects": "/",
        "project home": f"{p}/",
        "runs": f"{p}/runs/",
        "run": f"{p}/runs/{run.pk}/",
        "new run": f"{p}/runs/new/",
        "groups": f"{p}/runs/{run.pk}/groups/",
        "group": f"{p}/runs/{run.pk}/groups/1/0/",
        "trajectories": f"{p}/trajectories/",
        "trajectory": f"{p}/trajectories/{world['trajectory'].pk}/",
        "environments": f"{p}/environments/",
        "rubrics": f"{p}/rubrics/",
        "new rubric": f"{p}/rubrics/new/",
        "reward models": f"{p}/reward-models/",
        "queues": f"{p}/review/queues/",
        "queue": f"{p}/review/queues/{world['queue'].pk}/",
        "annotate": f"{p}/review/queues/{world['queue'].pk}/annotate/",
        "activity": f"{p}/activity/",
        "members": f"{p}/members/",
        "workers": "/workers/",
        "tokens": "/accounts/tokens/",
    }


def overflow(page) -> int:
    """How many px the page is wider than the phone's screen (a mobile viewport would zoom out to fit
    the content instead, hiding the overflow: the width is compared with the screen's, not innerWidth)."""
    return (
        page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")
        - PHONE["width"]
    )


WIDEST = """() => {
  const found = [];
  for (const node of document.querySelectorAll("body *")) {
    const box = node.getBoundingClientRect();
    if (box.right > window.innerWidth + 1 && box.width > 0) {
      let inside = node.parentElement, clipped = false;
      while (inside && inside !== document.body) {
        const style = getComputedStyle(inside);
        if (["auto", "scroll", "hidden"].includes(style.overflowX)) { clipped = true; break; }
        inside = inside.parentElement;
      }
      if (!clipped) found.push(node.tagName.toLowerCase() + "." + [...node.classList].join(".") + " " + Math.round(box.right));
    }
  }
  return found.slice(0, 6);
}"""


def widest(page) -> list[str]:
    """The elements that stick out of the screen (not inside a scrolling box), for the failure message."""
    return page.evaluate(WIDEST)


def test_no_main_page_overflows_a_phone_and_the_nav_folds(world, project, server, browser):
    context = browser.new_context(viewport=PHONE, bypass_csp=True)
    page = new_page(context)
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    try:
        page.goto(f"{server}/accounts/login/")
        assert overflow(page) <= 0, "sign-in page"
        sign_in(page, server, "alice", PASSWORD)
        too_wide = {}
        for name, path in main_pages(project, world).items():
            page.goto(server + path)
            page.wait_for_load_state("load")
            page.wait_for_timeout(150)  # charts lay out after load
            if overflow(page) > 0:
                too_wide[name] = (overflow(page), widest(page))
        assert too_wide == {}, f"pages wider than a 390 px screen (by px): {too_wide}"

        # The trajectory's reward breakdown scrolls sideways on a phone instead of being cut off.
        page.goto(f"{server}/p/{project.slug}/trajectories/{world['trajectory'].pk}/")
        box = page.evaluate("""() => {
          const table = document.querySelector('table.components'), box = table.closest('.table-scroll');
          return box && {overflow: getComputedStyle(box).overflowX, right: box.getBoundingClientRect().right};
        }""")
        assert box and box["overflow"] == "auto" and box["right"] <= PHONE["width"], box

        # The nav is a menu on a phone: folded until the button opens it.
        page.goto(f"{server}/p/{project.slug}/")
        runs_link = page.locator("nav.project-nav a:text-is('Runs')")
        expect(runs_link).to_be_hidden()
        page.click("[data-nav-toggle]")
        expect(runs_link).to_be_visible()
        assert page.get_attribute("[data-nav-toggle]", "aria-expanded") == "true"
        runs_link.click()
        page.wait_for_url("**/runs/")
    finally:
        context.close()
    assert missing == [], missing  # favicon.ico included


@pytest.fixture
def dark_page(browser):
    """A page in a browser whose system prefers dark."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, color_scheme="dark", bypass_csp=True
    )
    page = new_page(context)
    yield page
    context.close()


def test_dark_mode_follows_the_system_and_the_toggle_is_remembered(world, project, server, dark_page):
    page = dark_page

    def background() -> str:
        return page.evaluate("getComputedStyle(document.body).backgroundColor")

    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/")
    dark = background()
    assert dark == "rgb(21, 23, 28)"
    page.click("[data-theme-toggle]")
    assert background() == "rgb(247, 247, 248)"
    page.reload()
    assert background() == "rgb(247, 247, 248)"  # remembered across pages and reloads
    assert page.evaluate("localStorage.getItem('theme')") == "light"
    page.keyboard.press("Shift+D")
    assert background() == dark
    assert page.get_attribute("[data-theme-toggle]", "aria-pressed") == "true"

    # The "evaluation" badge stays readable in dark mode (it was light text on lavender).
    page.goto(f"{server}/p/{project.slug}/runs/{world['run'].pk}/groups/")
    ink, paper = page.evaluate("""() => {
      const badge = document.createElement('span');
      badge.className = 'badge split-eval';
      badge.textContent = 'eval';
      document.querySelector('main').appendChild(badge);
      const style = getComputedStyle(badge);
      return [style.color, style.backgroundColor];
    }""")
    assert contrast(ink, paper) >= 4.5, (ink, paper)


def contrast(first: str, second: str) -> float:
    """WCAG contrast ratio of two colours written "rgb(r, g, b)"."""

    def luminance(colour: str) -> float:
        channels = [int(v) / 255 for v in colour[colour.index("(") + 1 : colour.index(")")].split(",")[:3]]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(first), luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_question_mark_shows_the_shortcuts_on_every_page_and_the_favicon_is_served(
    world, project, server, page
):
    sign_in(page, server, "alice", PASSWORD)
    assert page.locator("link[rel=icon]").count() >= 1
    icon = page.request.get(f"{server}/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"] in {"image/x-icon", "image/vnd.microsoft.icon"}
    for name, path in main_pages(project, world).items():
        page.goto(server + path)
        page.wait_for_function("window.siteReady === true")
        page.locator("body").click(position={"x": 5, "y": 300}) if name == "annotate" else None
        page.keyboard.press("?")
        sheet = page.locator("[data-shortcuts]")
        expect(sheet, name).to_be_visible()
        expect(sheet).to_contain_text("show or hide this list")
        if name == "annotate":
            expect(sheet).to_contain_text("prefer the left")
        if name == "trajectories":
            expect(sheet).to_contain_text("search the trajectories")
        page.keyboard.press("Escape")
        expect(sheet).to_be_hidden()


def test_the_trajectory_page_folds_and_labels_by_kind(world, project, server, page):
    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/trajectories/{world['trajectory'].pk}/")
    page.wait_for_function("window.siteReady === true")
    folds = page.locator("details.fold")
    expect(folds.first).to_have_attribute("open", "")  # a short trace starts unfolded
    assert page.locator("pre:text-is('42')").count() == 1  # the tool's result, once
    page.click("[data-fold-toggle]")
    assert page.evaluate("[...document.querySelectorAll('details.fold')].every(d => !d.open)")
    expect(page.locator("table.components")).to_contain_text("what the pattern matched")
    expect(page.locator("table.components")).not_to_contain_text("judge says")


# What a person sees of a drawn chart: its paper (the svg's background), its plot area, its title and
# tick labels, beside the card it sits on and the page's text.
CHART_COLOURS = """(id) => {
  const div = document.getElementById(id);
  const colour = (node, property) => node ? getComputedStyle(node)[property] : null;
  const rgb = (value) => {  // a colour as the browser writes it: rgb(r, g, b)
    const probe = document.createElement("i");
    probe.style.color = value;
    document.body.appendChild(probe);
    const written = getComputedStyle(probe).color;
    probe.remove();
    return written;
  };
  return {
    paper: colour(div.querySelector(".main-svg"), "backgroundColor"),
    plot: rgb(div._fullLayout.plot_bgcolor),
    title: colour(div.querySelector(".gtitle"), "fill"),
    ticks: colour(div.querySelector(".xtick text"), "fill"),
    card: colour(div, "backgroundColor"),
    ink: colour(document.body, "color"),
  };
}"""


def test_the_charts_follow_dark_mode_live(world, project, server, dark_page):
    page = dark_page

    def chart() -> dict:
        return page.evaluate(CHART_COLOURS, "chart-reward")

    def rgb(hex_colour: str) -> str:
        value = hex_colour.lstrip("#")
        return "rgb({}, {}, {})".format(*(int(value[i : i + 2], 16) for i in (0, 2, 4)))

    def wait_for_paper(colour: str) -> None:
        page.wait_for_function(
            f"getComputedStyle(document.querySelector('#chart-reward .main-svg')).backgroundColor === '{colour}'"
        )

    def assert_matches_the_page(dark: bool) -> None:
        colours = chart()
        panel, ink = ("#1e2128", "#e6e8ec") if dark else ("#ffffff", "#1f2328")
        assert colours["card"] == rgb(panel), colours
        assert colours["paper"] == colours["card"], colours  # the chart sits on its card, seamless
        assert colours["plot"] == colours["card"], colours
        assert colours["title"] == colours["ticks"] == colours["ink"] == rgb(ink), colours

    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{world['run'].pk}/")
    page.wait_for_function("(document.getElementById('chart-reward').data || [{x: []}])[0].x.length === 3")
    assert_matches_the_page(dark=True)  # drawn in the system's dark mode

    page.click("[data-theme-toggle]")  # light, picked: the drawn chart follows without a redraw
    page.wait_for_function("getComputedStyle(document.body).color === 'rgb(31, 35, 40)'")
    wait_for_paper("rgb(255, 255, 255)")
    assert_matches_the_page(dark=False)
    assert page.evaluate("document.getElementById('chart-reward').data[0].x") == [1, 2, 3]

    page.keyboard.press("Shift+D")  # and back
    wait_for_paper("rgb(30, 33, 40)")
    assert_matches_the_page(dark=True)

    # Nobody picked (the choice forgotten): the system's preference turning light re-themes them too.
    page.evaluate("localStorage.removeItem('theme')")
    page.reload()
    page.wait_for_function("(document.getElementById('chart-reward').data || [{x: []}])[0].x.length === 3")
    assert_matches_the_page(dark=True)
    page.emulate_media(color_scheme="light")
    wait_for_paper("rgb(255, 255, 255)")
    assert_matches_the_page(dark=False)
    assert page.get_attribute("[data-theme-toggle]", "aria-pressed") == "false"
