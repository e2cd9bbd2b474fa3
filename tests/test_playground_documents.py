"""The playground with a document, in Debian's Chromium: the uploaded PDF's page drawn, the values' boxes on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .documents import Printer
from .test_playground_browser import CHROMIUM, CHROMIUM_ARGS, Page, _catalog, serve

EIFFEL_BEFORE, PERIOD, EIFFEL_AFTER = "埃菲尔铁塔位于法国巴黎，建于", "十九世纪末", "。"  # the dry run's answer
PAGE_W_PT = 450.0


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} not found: run `make setup-browser`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        running = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield running
        running.close()


def test_uploaded_pdf_page_shows_each_value_box_linked_to_its_field(
    browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    printed = Printer(browser).print_pages(
        ["<p>Page one.</p>", f'<p>{EIFFEL_BEFORE}<span data-mark="period">{PERIOD}</span>{EIFFEL_AFTER}</p>']
    )
    path: Path = tmp_path_factory.mktemp("docs") / "eiffel.pdf"
    path.write_bytes(printed.pdf)
    catalog = _catalog(tmp_path_factory.mktemp("catalog"))  # fixed examples only: the dry run answers Eiffel
    with serve(tmp_path_factory.mktemp("home"), catalog) as (url, _):
        page = Page(browser, url)
        try:
            page.pick("landmark_slots")
            page.page.set_input_files("#file", str(path))
            result = page.run()
            assert result["data"]["period"] == PERIOD and result["document"]["name"] == "eiffel.pdf"
            page.page.wait_for_selector('#pages figure[data-page="2"] .box[data-field="period"]')
            # the text shown is the document's converted text, with the value marked in it
            assert (PERIOD, PERIOD) in [(t, t) for _, t in page.marks()]
            canvas, box = page.page.evaluate(
                """() => [document.querySelector('#pages figure[data-page="2"] canvas'),
                          document.querySelector('#pages .box[data-field="period"]')]
                    .map(e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })"""
            )
            scale = canvas[2] / PAGE_W_PT  # CSS px per point
            [(number, x0, y0, x1, y1)] = printed.marks["period"]
            assert number == 2
            drawn = (box[0] - canvas[0], box[1] - canvas[1], box[0] - canvas[0] + box[2], box[1] - canvas[1] + box[3])
            for ours, theirs in zip(drawn, (x0 * scale, y0 * scale, x1 * scale, y1 * scale), strict=True):
                assert abs(ours - theirs) <= 2.0, (drawn, printed.marks["period"], scale)
            # the drawn page has the characters' ink inside the box
            ink = page.page.evaluate(
                """([x, y, w, h]) => { const c = document.querySelector('#pages figure[data-page="2"] canvas');
                    const k = c.width / c.getBoundingClientRect().width;
                    const d = c.getContext('2d').getImageData(x * k, y * k, w * k, h * k).data;
                    let dark = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 128) dark++; return dark; }""",
                [drawn[0], drawn[1], box[2], box[3]],
            )
            assert ink > 20
            # linked to the fields: the legend's field lights the box, the box lights the text's mark
            page.page.hover('#legend button[data-field="period"]')
            assert "selected" in page.page.get_attribute('#pages .box[data-field="period"]', "class")
            page.page.click('#pages .box[data-field="country"]')
            assert "selected" in page.page.get_attribute('#highlighted mark[data-field="country"]', "class")
            assert not page.errors, page.errors
        finally:
            page.close()
