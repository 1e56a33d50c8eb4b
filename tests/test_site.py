"""Tests of the built website (Jupyter Book 1.x): a warning-free build, launch URLs,
and a headless Chromium walk through the pages: navigation, chapter numbers, figures and
their captions, clean outputs, the search, and solutions that a learner opens on purpose."""
from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlparse

import pytest
import yaml

from _ext.course_facts import is_lab, toc_parts

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
STAMP = ROOT / "_build" / "site-build.json"  # the exit code and seconds of the last build
TITLE = "GPU Programming and AI Infrastructure"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SKIP_DIRS = {"_build", ".git", ".venv", "wheelhouse", "node_modules"}
# What no rendered output may show: a path of the machine that ran the notebook, and a warning
# (a Python warning's "Category: message", or the course's own "warning: ...").
MACHINE_PATH = re.compile(r"(?<![\w.:/~-])/(?:home|opt|tmp|root|work|scratch)/[\w.-]"
                          r"|site-packages|dist-packages|/usr/(?:local/)?lib/python")
WARNING = re.compile(r"\b\w*Warning: |^warning: ", re.MULTILINE)

pytestmark = pytest.mark.site  # `make gpu-test` deselects the site ("not browser and not site")


# --------------------------------------------------------------------------- helpers
def toc_files() -> list[str]:
    """Every page in _toc.yml, in reading order, without extensions (the site's own reading of it)."""
    root = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))["root"]
    return [root] + [page for _caption, pages in toc_parts(ROOT) for page in pages]


def chapter_number(doc: str) -> int:
    """chapters/13_serving -> 13: the number the prose calls a chapter by."""
    return int(re.fullmatch(r"chapters/(\d+)_\w+", doc).group(1))


CHAPTERS = [doc for doc in toc_files() if doc.startswith("chapters/")]
LABS = [doc for doc in toc_files() if is_lab(doc)]  # the releases, not solutions
NOTEBOOK_PAGES = [doc for doc in toc_files() if (ROOT / f"{doc}.ipynb").exists()]


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def site_sources() -> list[Path]:
    """The .md, .ipynb and .yml files a rebuild depends on."""
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        out += [Path(dirpath) / f for f in filenames if f.endswith((".md", ".ipynb", ".yml"))]
    out += list((ROOT / "_ext").glob("*.py"))  # the site's own Sphinx extensions
    out.append(ROOT / "course" / "gpu_cells.py")  # the %%gpu cells' anchors (_ext/gpu_anchors.py)
    out += [ROOT / "pyproject.toml", ROOT / "course" / "install.py"]  # facts on the pages (_ext/course_facts.py)
    return out


def site_is_stale() -> bool:
    index = HTML / "index.html"
    if os.environ.get("SITE_REBUILD") == "1" or not index.exists() or not STAMP.exists():
        return True
    built = min(index.stat().st_mtime, STAMP.stat().st_mtime)
    return any(p.stat().st_mtime > built for p in site_sources())


def jupyter_book() -> str:
    local = Path(sys.executable).with_name("jupyter-book")
    found = str(local) if local.exists() else shutil.which("jupyter-book")
    if not found:
        pytest.fail("jupyter-book is not installed: pip install -e '.[site]'")
    return found


def build_site() -> dict:
    """Build with warnings as errors; record the exit code, seconds and output tail."""
    started = time.monotonic()
    proc = subprocess.run([jupyter_book(), "build", ".", "-W", "--keep-going"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    result = {"returncode": proc.returncode, "seconds": round(time.monotonic() - started, 1),
              "log_tail": (proc.stdout + proc.stderr)[-6000:]}
    STAMP.parent.mkdir(parents=True, exist_ok=True)
    STAMP.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def page_path(doc: str) -> Path:
    return HTML / f"{doc}.html"


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


# --------------------------------------------------------------------------- build
@pytest.fixture(scope="session")
def site() -> dict:
    """Build the site if it is missing or older than its sources; return the build record."""
    if site_is_stale():
        result = build_site()
        result["fresh"] = True
    else:
        result = json.loads(STAMP.read_text(encoding="utf-8"))
        result["fresh"] = False
    return result


def test_build_is_warning_free(site):
    when = "this run" if site["fresh"] else "an earlier run, sources unchanged since"
    print(f"jupyter-book build -W --keep-going: exit {site['returncode']} in {site['seconds']} s ({when})")
    assert site["returncode"] == 0, f"the site build has warnings or errors:\n{site['log_tail']}"
    assert (HTML / "index.html").exists()


def test_every_toc_page_is_built(site):
    missing = [doc for doc in toc_files() if not page_path(doc).exists()]
    assert not missing, f"pages in _toc.yml with no HTML: {missing}"


def test_launch_urls(site):
    cfg = config()
    repo_name = cfg["repository"]["url"].rstrip("/").rsplit("/", 1)[1]
    branch = cfg["repository"]["branch"]
    hubs = {urlparse(u).hostname for k, u in cfg["launch_buttons"].items() if k.endswith("_url") and u}
    notebooks = [doc for doc in toc_files() if (ROOT / f"{doc}.ipynb").exists()]
    assert notebooks, "no notebook page in _toc.yml"
    for doc in notebooks:
        parser = _Links()
        parser.feed(page_path(doc).read_text(encoding="utf-8"))
        launch = [unquote(h) for h in parser.hrefs if urlparse(h).hostname in hubs]
        found = {urlparse(h).hostname for h in launch}
        assert found == hubs, f"{doc}: launch buttons for {sorted(found)}, expected {sorted(hubs)}"
        for url in launch:
            assert "/./" not in url, f"{doc}: '/./' in launch URL {url}"
            assert repo_name in url, f"{doc}: repository {repo_name} missing from {url}"
            assert branch in url, f"{doc}: branch {branch} missing from {url}"
            assert f"{doc}.ipynb" in url, f"{doc}: notebook path missing from {url}"


def test_every_gpu_skip_line_links_to_its_cell(site):
    """Without a GPU a %%gpu cell prints a link to its stored output (course/gpu_cells.py). Each
    link, made from the cell's text alone as in Colab, opens a built page at the cell itself: the
    element with that id is the cell whose code starts with that %%gpu line."""
    from course.gpu_cells import SITE_URL, output_url, split_source

    pages: dict[str, str | None] = {}
    checked, broken = 0, []
    for doc in NOTEBOOK_PAGES:
        for cell in json.loads((ROOT / f"{doc}.ipynb").read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            parts = split_source(source) if cell["cell_type"] == "code" else None
            if parts is None:
                continue
            checked += 1
            url = output_url(*parts)  # no notebook path: the kernel's view in Colab, nbclient and nbval
            page, _, anchor = url.removeprefix(SITE_URL).partition("#")
            where = f"{doc}, %%gpu {parts[0]!r} -> {url}"
            if not (url.startswith(SITE_URL) and page and anchor):
                broken.append(f"{where}: names no page and cell")
                continue
            if page not in pages:
                pages[page] = (HTML / page).read_text(encoding="utf-8") if (HTML / page).is_file() else None
            html = pages[page]
            at = html.find(f'id="{anchor}"') if html is not None else -1
            if at < 0:
                broken.append(f"{where}: {'no id ' + anchor if html is not None else 'no such page'}")
                continue
            # the element's text, up to the next cell (its code is split into highlighted spans, and
            # a hidden input sits under a "show" toggle)
            start = html.index(">", at) + 1
            end = html.find('<div class="cell ', start)
            shown = " ".join(unescape(re.sub(r"<[^>]+>", "", html[start:end if end > 0 else len(html)])).split())
            if " ".join(source.splitlines()[0].split()) not in shown:
                broken.append(f"{where}: the id is on another element than the cell")
    assert checked > 150, f"only {checked} %%gpu cells found in the notebooks of _toc.yml"
    assert not broken, f"{len(broken)} of {checked} %%gpu skip links do not resolve:\n" + "\n".join(broken)


# --------------------------------------------------------------------------- browser
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server(site):
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        msg = f"{' and '.join(missing)} not found: `make setup` installs chromium and chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="site-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def h1_text(driver) -> str:
    from selenium.webdriver.common.by import By

    heads = driver.find_elements(By.CSS_SELECTOR, "article h1")  # the page's own title, not the theme's
    return heads[0].text.strip() if heads else ""


@pytest.mark.browser
def test_landing_page(browser, server):
    browser.get(server)
    assert TITLE in browser.title
    assert h1_text(browser) == TITLE


def test_navigation_reaches_every_page(site):
    """Follow the left navigation from the landing page until no new page appears. The
    navigation is plain HTML (the theme writes every page's sidebar), so the built files are
    read as they are, without a browser."""
    from bs4 import BeautifulSoup

    seen: dict[str, str] = {}  # page path -> its h1
    todo = ["index.html"]
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        text = (HTML / path).read_text(encoding="utf-8")
        # Parse only what is read: the sidebar (before <main>) and the article's first <h1>.
        main = text.find("<main")
        article = text.find("<article", main)
        heading = re.search(r"<h1\b.*?</h1>", text[article:], re.S) if main >= 0 and article >= 0 else None
        seen[path] = (BeautifulSoup(heading.group(0), "html.parser").get_text(" ", strip=True).rstrip("#").strip()
                      if heading else "")
        sidebar = BeautifulSoup(text[:main] if main >= 0 else text, "html.parser")
        for a in sidebar.select(".bd-sidebar-primary nav a[href]"):
            link = urldefrag(a["href"]).url
            if not link or urlparse(link).scheme:
                continue  # the page itself, or another site
            target = os.path.normpath(os.path.join(os.path.dirname(path), unquote(link)))
            if target not in seen and (HTML / target).is_file():
                todo.append(target)
    for doc in toc_files():
        assert f"{doc}.html" in seen, f"{doc} is in _toc.yml but not reachable from the left navigation"
        assert seen[f"{doc}.html"], f"{doc}.html has no <h1>"


@pytest.mark.browser
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_shows_a_stored_figure(browser, server, chapter):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(urljoin(server, f"{chapter}.html"))
    widths = "return Array.from(document.querySelectorAll('article img')).map(i => i.complete ? i.naturalWidth : 0);"
    WebDriverWait(browser, 10).until(lambda d: any(w > 0 for w in d.execute_script(widths)),
                                     message=f"{chapter}: no figure with naturalWidth > 0")


def page_of(driver, server) -> str:
    """The page the browser shows, as a path under the site: labs/reduction/reduction.html."""
    return urlparse(driver.current_url).path.removeprefix(urlparse(server).path)


def is_solution(page: str) -> bool:
    return "/solutions/" in page


@pytest.mark.browser
def test_chapter_numbers_in_the_navigation(browser, server):
    """The prose says "chapter 13": the navigation and the chapter's heading say 13 too; labs are not numbered."""
    from selenium.webdriver.common.by import By

    browser.get(urljoin(server, "index.html"))
    nav = {urldefrag(a.get_attribute("href")).url.removeprefix(server): a.text.strip()
           for a in browser.find_elements(By.CSS_SELECTOR, ".bd-sidebar-primary nav a[href]")}
    for doc in CHAPTERS:
        n = chapter_number(doc)
        assert nav.get(f"{doc}.html", "").startswith(f"{n}. "), f"{doc} reads {nav.get(f'{doc}.html')!r} in the navigation, not '{n}. ...'"
    for doc in LABS:
        assert nav.get(f"{doc}.html", "").startswith("Lab "), f"{doc} reads {nav.get(f'{doc}.html')!r} in the navigation"
    for doc in CHAPTERS:
        browser.get(urljoin(server, f"{doc}.html"))
        assert h1_text(browser).startswith(f"{chapter_number(doc)}. "), f"{doc}: heading {h1_text(browser)!r}"


@pytest.mark.browser
@pytest.mark.parametrize("lab", LABS)
def test_next_from_a_lab_leads_on_and_its_solution_is_one_deliberate_link_away(browser, server, lab):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    name = lab.split("/")[1]
    browser.get(urljoin(server, f"{lab}.html"))
    article = [urldefrag(a.get_attribute("href")).url for a in browser.find_elements(By.CSS_SELECTOR, "article a[href]")]
    assert urljoin(server, f"labs/{name}/solutions/{name}.html") in article, (
        f"{lab}: no link to its solution in the page (the note `autograder release` writes under the title)")
    prev = browser.find_element(By.CSS_SELECTOR, "a.left-prev").get_attribute("href")
    assert not is_solution(urlparse(prev).path), f"Previous from {lab} opens the solution page {prev}"
    browser.find_element(By.CSS_SELECTOR, "a.right-next").click()
    WebDriverWait(browser, 10).until(lambda d: page_of(d, server) != f"{lab}.html", message=f"Next from {lab} went nowhere")
    landed, title = page_of(browser, server), h1_text(browser)
    assert not is_solution(landed) and not title.startswith("Solution to"), f"Next from {lab} opens {landed} ({title!r})"


@pytest.mark.browser
@pytest.mark.parametrize("page", NOTEBOOK_PAGES)
def test_outputs_show_no_machine_path_and_no_warning(browser, server, page):
    browser.get(urljoin(server, f"{page}.html"))
    outputs = browser.execute_script("""
        return Array.from(document.querySelectorAll('article .cell_output')).map(o => {
            const shown = o.cloneNode(true);  // without the copy buttons' own text
            shown.querySelectorAll('button').forEach(b => b.remove());
            return shown.textContent;
        });""")
    found = [f"output {i + 1} of {len(outputs)}: ...{' '.join(text[max(0, m.start() - 40):m.end() + 60].split())}..."
             for i, text in enumerate(outputs) for rx in (MACHINE_PATH, WARNING) for m in [rx.search(text)] if m]
    assert not found, f"{page} shows what a reader should not see:\n" + "\n".join(found)


@pytest.mark.browser
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_stored_figure_has_a_numbered_caption_and_alt_text(browser, server, chapter):
    """Captions come from each figure cell's metadata: mystnb: {figure: {caption, name}, image: {alt}}."""
    browser.get(urljoin(server, f"{chapter}.html"))
    figures = browser.execute_script("""
        return Array.from(document.querySelectorAll('article .cell_output img')).map(img => {
            const fig = img.closest('figure');
            const q = sel => (fig && fig.querySelector(sel)) ? fig.querySelector(sel).textContent.trim() : '';
            return {alt: img.getAttribute('alt') || '', number: q('figcaption .caption-number'),
                    caption: q('figcaption .caption-text')};
        });""")
    assert figures, f"{chapter} shows no stored figure"
    n = chapter_number(chapter)
    for i, fig in enumerate(figures, 1):
        where = f"{chapter}, stored figure {i} of {len(figures)}"
        assert fig["number"].startswith(f"Fig. {n}.") and fig["caption"], f"{where}: no numbered caption ({fig})"
        assert fig["alt"] and not re.search(r"\.(png|svg|jpe?g)$|_images/", fig["alt"]), f"{where}: alt text {fig['alt']!r}"


@pytest.mark.browser
def test_search_finds_chapters_and_labs_but_no_solution(browser, server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(urljoin(server, "search.html?q=reduction"))
    WebDriverWait(browser, 30).until(
        lambda d: "Search finished" in d.find_element(By.CSS_SELECTOR, "#search-results .search-summary").text,
        message="search for 'reduction' did not finish within 30 s")
    found = [urlparse(a.get_attribute("href")).path.removeprefix(urlparse(server).path)
             for a in browser.find_elements(By.CSS_SELECTOR, "#search-results ul.search li a[href]")]
    assert "chapters/06_reduction.html" in found and "labs/reduction/reduction.html" in found, found
    assert not [p for p in found if is_solution(p)], f"search lists solution pages: {found}"
