"""The rendered email in a real browser (Debian's Chromium via Playwright): phone and desktop
widths, light and dark mode. Screenshots go to tests/artifacts/email/ for review."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from syndicate.config import Config, parse_config
from syndicate.digest import select_digest
from syndicate.reader import read_articles
from syndicate.render import render_digest
from tests.conftest import ARTICLES
from tests.conftest import ARTIFACTS as ARTIFACTS_ROOT

ARTIFACTS = ARTIFACTS_ROOT / "email"
LINKS = {
    "unsubscribe_url": "https://news.example.org/unsubscribe?token=abc",
    "preferences_url": "https://news.example.org/preferences?token=abc",
    "view_url": "https://news.example.org/digest/view?token=abc",
}
VARIANTS = [
    ("en", ("cost",)),
    ("de", ("architects", "cost", "procurement", "strategy", "ecosystem")),
]

# Text colour against the background it actually sits on (the nearest opaque ancestor),
# as WCAG contrast ratios; hidden text (the preheader) is skipped.
CONTRAST_JS = """() => {
  const rgba = c => c.match(/[\\d.]+/g).map(Number);
  const channel = v => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  const lum = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  const background = el => {
    for (; el; el = el.parentElement) {
      const c = rgba(getComputedStyle(el).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const el = node.parentElement;
    const box = el.getBoundingClientRect();
    if (!node.textContent.trim() || box.width === 0 || box.height === 0) continue;
    const [a, b] = [lum(rgba(getComputedStyle(el).color)), lum(background(el))];
    found.push({text: node.textContent.trim().slice(0, 50),
                ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)});
  }
  return {texts: found, page: lum(background(document.body))};
}"""


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    config: Config = parse_config({}, root=Path("."), source="(test)", env={})
    found = read_articles(ARTICLES, config.profiles)
    out = {}
    for lang, audiences in VARIANTS:
        rendered = render_digest(select_digest(found, lang, audiences), config)
        out[rendered.key] = rendered.personalise(**LINKS).html
    # A digest that lists fewer articles than its window holds ends with a line to the rest.
    capped = replace(select_digest(found, "nl", ("cost",)), more=14)
    out["nl-cost-more"] = render_digest(capped, config).personalise(**LINKS).html
    return out


def open_page(browser: Any, html: str, width: int, scheme: str = "light") -> Any:
    page = browser.new_page(viewport={"width": width, "height": 800}, color_scheme=scheme)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.set_content(html)
    assert requests == [], "the email fetched something from elsewhere"
    return page


def shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


KEYS = ["en-cost", "de-architects+cost+ecosystem+procurement+strategy", "nl-cost-more"]


@pytest.mark.parametrize("key", KEYS)
def test_no_horizontal_overflow_on_a_phone(browser: Any, pages: dict[str, str], key: str) -> None:
    page = open_page(browser, pages[key], 375)
    try:
        shoot(page, f"{key}-375")
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        widest = page.evaluate(
            "Math.max(...[...document.body.querySelectorAll('*')]"
            ".map(e => e.getBoundingClientRect().right))"
        )
        assert widest <= 375
    finally:
        page.close()


@pytest.mark.parametrize("key", KEYS)
def test_desktop_layout_is_one_centred_column(
    browser: Any, pages: dict[str, str], key: str
) -> None:
    page = open_page(browser, pages[key], 800)
    try:
        shoot(page, f"{key}-800")
        assert page.evaluate("document.documentElement.scrollWidth") <= 800
        cards = page.evaluate(
            "[...document.querySelectorAll('div.card')].map(e => {"
            "const r = e.getBoundingClientRect(); return [r.left, r.width]; })"
        )
        assert len(cards) >= 2
        assert all(card == [100, 600] for card in cards), cards
        headings = page.evaluate("[...document.querySelectorAll('h2, h3')].length")
        assert headings >= 2
        if key.endswith("-more"):  # the line to the rest: a visible link, in the last card
            link = page.get_by_role("link", name="En nog 14 artikelen →")
            assert link.is_visible() and link.get_attribute("href") == "http://127.0.0.1:8080/nl/"
            box = link.bounding_box()
            assert box is not None and 100 < box["x"] < 700
    finally:
        page.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_keeps_its_contrast_in_light_and_dark_mode(
    browser: Any, pages: dict[str, str], scheme: str
) -> None:
    key = "de-architects+cost+ecosystem+procurement+strategy"
    page = open_page(browser, pages[key], 800, scheme)
    try:
        shoot(page, f"{key}-800-{scheme}")
        found = page.evaluate(CONTRAST_JS)
    finally:
        page.close()
    assert len(found["texts"]) > 30
    low = [t for t in found["texts"] if t["ratio"] < 4.5]
    assert low == [], f"text below WCAG AA contrast in {scheme} mode: {low[:5]}"
    # The scheme really switches: a dark page in dark mode, a light one otherwise.
    assert (found["page"] < 0.05) if scheme == "dark" else (found["page"] > 0.8)
