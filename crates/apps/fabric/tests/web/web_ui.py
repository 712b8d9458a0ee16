"""Drives the web run viewer of `fabric serve` in headless Chromium with Selenium (issue #13).

usage: web_ui.py CASE --base URL --artifacts DIR [--token TOKEN] [--run-id ID] [--text T]

The Rust test (crates/apps/fabric/tests/suite/web_ui.rs) starts the server, the scripted
model and the runs; this script does what a person would do in the browser, saves a
screenshot of each page into DIR, and prints one JSON object on its last line with what it
saw and measured, for the Rust test to check against the server. A step that does not
happen in time fails with a traceback (exit 1).

Every case also checks, from Chromium's own network log, that the page asked nothing of any
other origin, and that no Content-Security-Policy violation happened.

Cases:
  live       follow a running run (--run-id) to its end: events arrive while it runs
  resume     follow a running run (--run-id) while the network drops: the page reconnects
             and goes on after the last event it drew (it creates DIR/following when the
             test may cut the connection)
  cancel     cancel a running run (--run-id) with the page's button
  list       the runs list: filter by status and specialist, search (--text), page back
  start      start a run from the form (pack --text), then follow it on its page
  token      a server with a token (--token): asked once, kept in the tab, never in a URL
  delegation a run that delegated (--run-id): its sub-run nested, linked, and linking back
  first_page with many runs stored: how long the first page takes, three loads
  big_run    a run of many steps (--run-id): how long it takes to draw, and how responsive
             the page stays meanwhile
  live_output a running `shell` command (--run-id): its lines under its call while it runs
             (issue #42), replaced by its result at its end
  answer     a run that waits for an answer (--run-id): an empty answer refused with the
             server's message, then the choice --text clicked; the run goes on to its end
  approve    a run whose calls wait for approval (--run-id): the first denied with the reason
             --text, the second approved, the third approved for the rest of the run
  steer      a running run (--run-id): --text said in the steering box, seen in the timeline
  project    an ended project run (--run-id): its diff per file, one checkpoint's, applied
"""
import argparse
import base64
import json
import os
import sys
import time

os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download anything

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = os.environ.get("FABRIC_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("FABRIC_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")

# Recorded in every page before its own scripts run (DevTools injection is not subject to
# the page's CSP): CSP violations, and main-thread tasks longer than 50 ms.
WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push(e.violatedDirective + ' ' + e.blockedURI);
});
window.__long = [];
// What the run page's stream went through (`data-follow`), in order, without repeats.
window.__followStates = [];
new MutationObserver(() => {
  const state = document.body && document.body.dataset.follow;
  const seen = window.__followStates;
  if (state && seen[seen.length - 1] !== state) seen.push(state);
}).observe(document, { attributes: true, subtree: true, attributeFilter: ['data-follow'] });
try {
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.__long.push(entry.duration);
  }).observe({ type: 'longtask', buffered: true });
} catch (e) {}
"""


class Browser:
    def __init__(self, base, artifacts, token=None):
        self.base = base.rstrip("/")
        self.artifacts = artifacts
        self.token = token
        self.shots = []
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in [
            "--headless=new",
            "--no-sandbox",  # the tests run as root in CI, where Chromium's sandbox cannot
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            "--lang=en-US",
            # Chromium itself must not call out either (updates, metrics, safe browsing):
            # every name but loopback resolves to nothing.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-client-side-phishing-detection",
            "--disable-domain-reliability",
            "--metrics-recording-only",
        ]:
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        self.driver = webdriver.Chrome(
            options=options, service=Service(CHROMEDRIVER, log_output=os.devnull)
        )
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
        self.requests = []
        self.expected_console = []

    def open(self, hash_route=""):
        self.driver.get(self.base + "/" + hash_route)

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def wait(self, condition, timeout=20, what=None):
        """Waits until the JavaScript expression `condition` is truthy; returns its value."""
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(
                lambda d: d.execute_script("return " + condition)
            )
        except Exception as error:
            self.shot("failed-" + (what or "wait").replace(" ", "-"))
            raise AssertionError(f"not within {timeout} s: {what or condition}") from error

    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def shot(self, name, full=True):
        """A screenshot of the viewport, or of the whole page (up to 6000 px high)."""
        path = os.path.join(self.artifacts, name + ".png")
        if full:
            # Rows out of view are laid out only once in view (`content-visibility`), so the
            # page's height is known only after a tall window has shown them all.
            self.js("window.scrollTo(0, 0)")
            self.driver.set_window_size(1280, 6000)
            time.sleep(0.3)
            height = self.js("return Math.ceil(document.getElementById('view').getBoundingClientRect().bottom) + 20")
            clip = {"x": 0, "y": 0, "width": 1280, "height": min(max(int(height), 600), 6000), "scale": 1}
            shot = self.driver.execute_cdp_cmd(
                "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})
            with open(path, "wb") as out:
                out.write(base64.b64decode(shot["data"]))
            self.driver.set_window_size(1280, 900)
        else:
            self.driver.save_screenshot(path)
        self.shots.append(path)
        return path

    def network(self):
        """Every URL the browser requested so far (from its DevTools log)."""
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                self.requests.append(message["params"]["request"]["url"])
        return self.requests

    def check_nothing_left_the_server(self):
        urls = self.network()
        outside = [
            u for u in urls
            if not (u == self.base or u.startswith(self.base + "/") or u.startswith("data:"))
        ]
        assert not outside, f"requests outside {self.base}: {outside}"
        if self.token:
            leaked = [u for u in urls if self.token in u]
            assert not leaked, f"the token is in a URL: {leaked}"
        violations = self.js("return window.__csp || []")
        assert not violations, f"CSP violations: {violations}"
        # Answers of 4xx are part of the cases (a refused token, an unknown specialist), and
        # so is a network that drops for a moment (`resume`); anything else on the console
        # is the page failing.
        expected = ["the server responded with a status of 4"] + self.expected_console
        errors = [
            e["message"] for e in self.driver.get_log("browser")
            if e.get("level") == "SEVERE" and not any(x in e["message"] for x in expected)
        ]
        assert not errors, f"console errors: {errors}"
        return len(urls)

    def quit(self):
        self.driver.quit()


def wait_drawn(b, what, timeout=30):
    """Waits until the run page has drawn its run's terminal event."""
    b.wait("document.body.dataset.drawn === 'end'", timeout=timeout, what=what)


def events_shown(b):
    return int(b.js("return Number(document.body.dataset.events || 0)"))


def case_live(b, args):
    b.open("#/runs/" + args.run_id)
    b.wait("document.body.dataset.runState === 'running' && Number(document.body.dataset.events || 0) > 0",
           what="the running run's first events")
    samples = []
    live_shot = None
    deadline = time.time() + 60
    while time.time() < deadline:
        state = b.js("return document.body.dataset.runState")
        count = events_shown(b)
        samples.append({"t": round(time.time(), 3), "events": count, "state": state})
        if live_shot is None and state == "running" and b.find_all(".ev.call"):
            assert not b.find("#live").get_attribute("hidden"), "the live mark shows"
            live_shot = b.shot("run-live")
        if state == "ended":
            break
        time.sleep(0.1)
    wait_drawn(b, "the run's end")
    shown = {
        "status": b.find("#run-status").text,
        "events": events_shown(b),
        "rows": len(b.find_all("ol.events > li.ev")),
        "files": [li.find_element(By.CSS_SELECTOR, "code").text for li in b.find_all("#files li")],
        "security": [e.text for e in b.find_all(".ev.security")],
        "errors": [e.text for e in b.find_all(".result.error")],
        "calls": [e.text for e in b.find_all(".ev.call .tool")],
        "args": [e.text for e in b.find_all(".ev.call .args")],
        "results": [e.text for e in b.find_all(".ev.call .result")],
        "result": b.find("#result").text,
        "prompt": b.find("#prompt-text").text,
        "cancel_hidden": b.find("#cancel").get_attribute("hidden") is not None,
        "xss": b.js("return window.__xss === undefined ? null : window.__xss"),
    }
    b.shot("run-finished")
    return {"samples": samples, "shown": shown}


def case_resume(b, args):
    b.open("#/runs/" + args.run_id)
    b.wait("document.body.dataset.runState === 'running' && document.querySelector('ol.events .ev.call')",
           what="the running run's first tool call")
    # Tell the Rust test to cut the connection now; it lets new ones through a moment later.
    open(os.path.join(args.artifacts, "following"), "w").close()
    b.wait("document.body.dataset.follow === 'reconnecting'", timeout=30, what="the page noticing the drop")
    b.shot("run-reconnecting", full=False)
    wait_drawn(b, "the run's end after the drop", timeout=60)
    b.shot("run-resumed")
    return {
        "states": b.js("return window.__followStates || []"),
        "events": events_shown(b),
        "seqs": b.js("return [...document.querySelectorAll('#timeline [data-seq]')].map((e) => Number(e.dataset.seq))"),
        "status": b.find("#run-status").text,
    }


def case_cancel(b, args):
    b.open("#/runs/" + args.run_id)
    b.wait("document.body.dataset.runState === 'running' && document.querySelector('.ev.call')",
           what="the running run's first tool call")
    b.wait("!document.querySelector('#cancel').hidden", what="the cancel button")
    b.shot("run-before-cancel")
    b.find("#cancel").click()
    b.wait("document.body.dataset.runStatus === 'cancelled'", timeout=30, what="the cancelled status")
    shown = {
        "status": b.find("#run-status").text,
        "end": b.find(".ev.end-failed").text,
        "cancel_hidden": b.find("#cancel").get_attribute("hidden") is not None,
    }
    b.shot("run-cancelled")
    return {"shown": shown}


def case_live_output(b, args):
    b.open("#/runs/" + args.run_id)
    b.wait("document.querySelectorAll('.ev.call .live-output .line').length >= 2", timeout=30,
           what="two live lines under the running call")
    running = {
        "state": b.js("return document.body.dataset.runState"),
        "lines": [e.text for e in b.find_all(".ev.call .live-output .line")],
        "classes": [e.get_attribute("class") for e in b.find_all(".ev.call .live-output .line")],
        "results": len(b.find_all(".ev.call .result")),
    }
    b.shot("run-live-output")
    wait_drawn(b, "the run's end")
    ended = {
        "live_blocks": len(b.find_all(".live-output")),
        "results": [e.text for e in b.find_all(".ev.call .result")],
    }
    b.shot("run-live-output-ended")
    return {"running": running, "ended": ended}


def listed(b):
    return [
        {
            "run_id": row.get_attribute("data-run"),
            "status": row.get_attribute("data-status"),
            "specialists": row.find_element(By.CSS_SELECTOR, ".specialists").text,
            "prompt": row.find_element(By.CSS_SELECTOR, ".prompt > a").get_attribute("textContent"),
        }
        for row in b.find_all("#runs tbody tr")
    ]


def wait_list(b, what):
    # Each list view sets `data-listed` when drawn; cleared first so a new one is awaited.
    b.wait("document.body.dataset.view === 'list' && document.body.dataset.listed !== undefined",
           what=what)
    rows = listed(b)
    b.js("delete document.body.dataset.listed")
    return rows


def case_list(b, args):
    seen = {}
    b.open("")
    seen["first"] = wait_list(b, "the first page")
    b.shot("runs-list", full=False)
    Select(b.find("#status-filter")).select_by_value("failed")  # submits on change
    seen["failed"] = wait_list(b, "the failed runs")
    seen["failed_hash"] = b.js("return location.hash")
    b.find("#specialist-filter").send_keys("research")
    b.find("#filter-form button[type=submit]").click()
    seen["failed_research"] = wait_list(b, "the failed runs of research")
    b.find("#filter-form a.link").click()  # Clear
    seen["cleared"] = wait_list(b, "every run again")
    b.find("#older").click()
    seen["older"] = wait_list(b, "the second page")
    seen["older_hash"] = b.js("return location.hash")
    b.find("#newest").click()
    seen["newest"] = wait_list(b, "the first page again")
    b.find("#q").send_keys(args.text)
    b.find("#filter-form button[type=submit]").click()
    seen["search"] = wait_list(b, "the search's hits")
    seen["search_note"] = b.find("#results > p.muted").text
    b.shot("runs-search")
    # A prompt written as HTML is shown as text.
    b.open("")
    seen["html_rows"] = [r for r in wait_list(b, "the first page") if "<" in r["prompt"]]
    seen["xss"] = b.js("return window.__xss === undefined ? null : window.__xss")
    return seen


def case_start(b, args):
    b.open("#/new")
    b.wait("document.body.dataset.view === 'new'", what="the form")
    b.find("#prompt").send_keys("Create hello.txt from the form")
    b.find("#pack").send_keys("nobody")
    b.find("#start").click()
    b.wait("document.querySelector('#new-error .error')", what="the unknown specialist's error")
    refused = b.find("#new-error").text
    b.shot("new-run-refused")
    pack = b.find("#pack")
    pack.clear()
    pack.send_keys(args.text)
    b.shot("new-run-form")
    b.find("#start").click()
    b.wait("location.hash.startsWith('#/runs/')", what="the new run's page")
    run_id = b.js("return decodeURIComponent(location.hash.slice('#/runs/'.length))")
    wait_drawn(b, "the new run's end")
    shown = {
        "status": b.find("#run-status").text,
        "files": [e.text for e in b.find_all("#files code")],
        "members": sorted({e.text for e in b.find_all("ol.events .member")}),
        "result": b.find("#result").text,
    }
    b.shot("new-run-finished")
    return {"refused": refused, "run_id": run_id, "shown": shown}


def case_token(b, args):
    b.open("")
    b.wait("document.getElementById('token-dialog').open", what="the token dialog")
    b.shot("token-asked", full=False)
    b.find("#token-input").send_keys("not-the-token")
    b.find("#token-submit").click()
    b.wait("document.getElementById('token-dialog').open && !document.getElementById('token-error').hidden",
           what="the refused token's message")
    refused = b.find("#token-error").text
    b.find("#token-input").send_keys(args.token)
    b.find("#token-submit").click()
    first = wait_list(b, "the list behind the token")
    kept = b.js("return sessionStorage.getItem('fabric.token')")
    url = b.js("return location.href")
    b.shot("token-accepted")
    # A reload keeps the token in the tab: no second question.
    b.driver.refresh()
    again = wait_list(b, "the list after a reload")
    asked_again = b.js("return document.getElementById('token-dialog').open")
    # The run page's stream carries the token too.
    b.open("#/runs/" + first[0]["run_id"])
    wait_drawn(b, "a run's page behind the token")
    events = events_shown(b)
    b.find("#forget-token").click()
    b.wait("document.getElementById('token-dialog').open", what="the dialog after forgetting")
    forgotten = b.js("return sessionStorage.getItem('fabric.token')")
    return {
        "refused": refused, "rows": len(first), "kept_matches": kept == args.token,
        "url": url, "rows_after_reload": len(again), "asked_again": asked_again,
        "events": events, "forgotten": forgotten,
    }


def case_delegation(b, args):
    b.open("#/runs/" + args.run_id)
    # While the sub-agent works, its run is found and nested before the call returns.
    live_child = b.wait("(document.querySelector('.child-wait details.child') || {}).dataset?.child",
                        what="the sub-run while it works")
    b.shot("run-with-live-sub-agent")
    wait_drawn(b, "the lead run's end")
    child = b.find("details.child")
    child_id = child.get_attribute("data-child")
    child.find_element(By.CSS_SELECTOR, "summary .label").click()
    b.wait("document.querySelector('details.child .timeline .ev-run_complete')", what="the sub-run's own events")
    nested = [e.text for e in b.find_all("details.child .timeline .tool")]
    b.shot("run-with-sub-agent")
    child.find_element(By.CSS_SELECTOR, "summary a.run-id").click()
    b.wait(f"location.hash === '#/runs/{child_id}'", what="the sub-run's page")
    wait_drawn(b, "the sub-run's end")
    parent = b.find("#parent a").text
    b.shot("sub-run")
    b.open("")
    rows = wait_list(b, "the list with the sub-run")
    marked = [r["run_id"] for r in rows if r["run_id"] == child_id]
    sub_note = b.find(f"tr[data-run='{child_id}']").text
    return {"child_id": child_id, "live_child": live_child, "nested_tools": nested, "parent": parent,
            "listed": marked, "row": sub_note}


def case_first_page(b, args):
    times = []
    b.open("")
    for load in range(3):
        if load:
            b.driver.refresh()
        b.wait("performance.getEntriesByName('fabric:list-rendered').length > 0", what="the first page")
        times.append(b.js(
            "return performance.getEntriesByName('fabric:list-rendered')[0].startTime"))
    rows = len(b.find_all("#runs tbody tr"))
    nav = b.js("const n = performance.getEntriesByType('navigation')[0];"
               "return {dom: n.domContentLoadedEventEnd, load: n.loadEventEnd}")
    b.shot("runs-list-10000", full=False)
    return {"rendered_ms": times, "rows": rows, "navigation": nav,
            "older": len(b.find_all("#older"))}


def case_big_run(b, args):
    b.open("#/runs/" + args.run_id)
    # While the events are drawn, a script round trip must keep coming back quickly: that
    # is the main thread being free for the person's clicks and scrolls.
    rtts = []
    deadline = time.time() + 120
    while time.time() < deadline:
        t = time.perf_counter()
        done = b.js("return performance.getEntriesByName('fabric:run-rendered').length > 0")
        rtts.append((time.perf_counter() - t) * 1000)
        if done:
            break
        time.sleep(0.02)
    rendered = b.js("return performance.getEntriesByName('fabric:run-rendered')[0].startTime")
    wait_drawn(b, "the big run's end")
    events = events_shown(b)
    long_tasks = b.js("return window.__long")
    # Long outputs are cut until asked for.
    cut = b.find_all("pre.cut")
    cut_lengths = [len(p.get_attribute("textContent")) for p in cut[:5]]
    button = b.find(".long .more")
    b.js("arguments[0].scrollIntoView({block: 'center'})", button)
    t = time.perf_counter()
    button.click()
    expanded = len(b.find(".long pre").get_attribute("textContent"))
    click_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    b.js("window.scrollTo(0, document.documentElement.scrollHeight)")
    scroll_ms = (time.perf_counter() - t) * 1000
    b.shot("run-500-steps", full=False)
    return {
        "rendered_ms": rendered, "events": events, "rtt_ms_max": max(rtts), "rtt_samples": len(rtts),
        "long_tasks_ms": long_tasks, "cut": len(cut), "cut_lengths": cut_lengths,
        "expanded_length": expanded, "click_ms": click_ms, "scroll_ms": scroll_ms,
        "dom_nodes": b.js("return document.getElementsByTagName('*').length"),
    }


def case_continued(b, args):
    """A run that continues another (issue #42): the header and its run_start row link to
    the earlier run, and the link leads there."""
    b.open("#/runs/" + args.run_id)
    wait_drawn(b, "the continued run's end")
    header = b.find("#parent").text
    row = b.find(".ev-run_start .continues").text
    link = b.find("#parent a")
    earlier = link.text
    b.shot("continued-run")
    link.click()
    b.wait(f"location.hash === '#/runs/{earlier}'", what="the earlier run's page")
    wait_drawn(b, "the earlier run's end")
    b.shot("earlier-run")
    return {"header": header, "row": row, "earlier": earlier}


def press(b, css):
    """Clicks the element `css` in the middle of the window (not under the sticky top bar)."""
    element = b.find(css)
    b.js("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def attend_card(b, what, previous=None):
    """Waits for the question or approval card of a waiting run (another one than
    `previous`, the `seq` of the last one answered) and returns its `seq`."""
    b.wait("(() => { const c = document.getElementById('attend-card');"
           " return c && !c.hidden && !c.dataset.sent && c.dataset.asked"
           f" && c.dataset.asked !== {json.dumps(previous or '')} && c.dataset.asked; }})()",
           timeout=30, what=what)
    return b.js("return document.getElementById('attend-card').dataset.asked")


def case_answer(b, args):
    b.open("#/runs/" + args.run_id)
    attend_card(b, "the question's card")
    asked = {
        "question": b.find("#question").text,
        "choices": [e.text for e in b.find_all("#attend-card .choice")],
        "status": b.find("#run-status").text,
        "timeline": b.find(".ev-input_required").text,
    }
    b.shot("question")
    # An empty answer: the server's 422 message is shown, and the card stays.
    press(b, "#answer-send")
    b.wait("document.querySelector('#attend-error .error')", what="the refusal's message")
    refused = b.find("#attend-error").text
    b.shot("question-refused")
    choice = [e for e in b.find_all("#attend-card .choice") if e.text == args.text][0]
    b.js("arguments[0].scrollIntoView({block: 'center'})", choice)
    choice.click()
    wait_drawn(b, "the answered run's end", timeout=60)
    shown = {
        "status": b.find("#run-status").text,
        "answered": b.find(".ev-input_answered").text,
        "card_hidden": b.find("#attend-card").get_attribute("hidden") is not None,
        "result": b.find("#result").text,
        "states": b.js("return window.__followStates || []"),
    }
    b.shot("question-answered")
    return {"asked": asked, "refused": refused, "shown": shown}


def case_approve(b, args):
    b.open("#/runs/" + args.run_id)
    first = attend_card(b, "the first approval")
    asked = {"tool": b.find("#approval-tool").text, "args": b.find("#attend-card .approval-args").text}
    b.find("#deny-reason").send_keys(args.text)
    b.shot("approval-first")
    press(b, "#deny")
    second = attend_card(b, "the second approval", first)
    second_args = b.find("#attend-card .approval-args").text
    b.shot("approval-second")
    press(b, "#approve")
    third = attend_card(b, "the third approval", second)
    third_args = b.find("#attend-card .approval-args").text
    press(b, "#approve-for-run")
    wait_drawn(b, "the approved run's end", timeout=60)
    shown = {
        "status": b.find("#run-status").text,
        "answers": [e.text for e in b.find_all(".ev-input_answered")],
        "asked": [e.text for e in b.find_all(".ev-input_required")],
    }
    b.shot("approvals-done")
    return {"asked": asked, "second": second_args, "third": third_args, "shown": shown}


def case_steer(b, args):
    b.open("#/runs/" + args.run_id)
    b.wait("document.getElementById('steer-card') && !document.getElementById('steer-card').hidden",
           timeout=30, what="the steering box of the running run")
    b.find("#steer-text").send_keys(args.text)
    b.shot("steer-typed", full=False)
    press(b, "#steer-send")
    b.wait("document.getElementById('steer-note').textContent.startsWith('Sent')", what="the message sent")
    sent = b.find("#steer-note").text
    wait_drawn(b, "the steered run's end", timeout=60)
    shown = {
        "said": [e.text for e in b.find_all(".ev-user_message")],
        "steer_hidden": b.find("#steer-card").get_attribute("hidden") is not None,
        "status": b.find("#run-status").text,
    }
    b.shot("steered")
    return {"sent": sent, "shown": shown}


def diff_files(b):
    return [
        {
            "path": d.get_attribute("data-path"),
            "summary": d.find_element(By.CSS_SELECTOR, "summary").text,
            "diff": d.find_element(By.CSS_SELECTOR, "pre.diff").get_attribute("textContent"),
            "added": [e.get_attribute("textContent") for e in d.find_elements(By.CSS_SELECTOR, ".dl.add")],
        }
        for d in b.find_all("#diff-files details.file-diff")
    ]


def case_project(b, args):
    b.open("#/runs/" + args.run_id)
    wait_drawn(b, "the project run's end")
    b.wait("document.getElementById('project-card').dataset.diff === 'run'", what="the run's diff")
    whole = {
        "where": b.find("#project-where").text,
        "head": b.find("#diff-files .diff-head").text,
        "files": diff_files(b),
        "views": [e.text for e in b.find_all("#diff-views button")],
        "timeline": [e.text for e in b.find_all(".ev-workspace")] + [e.text for e in b.find_all(".ev-checkpoint")],
    }
    b.shot("project-diff")
    # The second checkpoint's changes, from its row in the timeline.
    buttons = b.find_all(".ev-checkpoint .show-checkpoint")
    commit = buttons[-1].get_attribute("data-commit")
    b.js("arguments[0].click()", buttons[-1])
    b.wait(f"document.getElementById('project-card').dataset.diff === {json.dumps(commit)}", what="the checkpoint's diff")
    checkpoint = {"commit": commit, "files": diff_files(b), "head": b.find("#diff-files .diff-head").text}
    b.shot("project-checkpoint")
    press(b, "#apply")
    b.wait("document.getElementById('project-card').dataset.applied", what="applied")
    applied = b.find("#project-note").text
    b.shot("project-applied")
    return {
        "whole": whole, "checkpoint": checkpoint, "applied": applied,
        "xss": b.js("return window.__xss === undefined ? null : window.__xss"),
    }


CASES = {
    "answer": case_answer, "approve": case_approve, "steer": case_steer, "project": case_project,
    "continued": case_continued,
    "live": case_live, "resume": case_resume, "cancel": case_cancel, "list": case_list, "start": case_start,
    "token": case_token, "delegation": case_delegation, "first_page": case_first_page,
    "big_run": case_big_run, "live_output": case_live_output,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--base", required=True)
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--token")
    parser.add_argument("--run-id")
    parser.add_argument("--text", default="")
    args = parser.parse_args()
    os.makedirs(args.artifacts, exist_ok=True)
    browser = Browser(args.base, args.artifacts, args.token)
    if args.case == "resume":
        browser.expected_console.append("net::ERR_")  # the connections the test cuts
    try:
        seen = CASES[args.case](browser, args)
        seen["requests"] = browser.check_nothing_left_the_server()
        seen["screenshots"] = browser.shots
    finally:
        browser.quit()
    print(json.dumps(seen))


if __name__ == "__main__":
    sys.exit(main())
