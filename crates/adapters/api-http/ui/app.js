// The web run viewer of agent-fabric (issue #13, ADR-054): the runs list, a run followed
// live over Server-Sent Events, cancelling, and a form to start a run. Plain browser
// JavaScript, no build step, no library.
//
// Rules this file keeps:
// - Run data (prompts, model text, tool arguments and output) reaches the page only as text
//   (`textContent`, text nodes, attribute values): it may hold HTML and must never run.
// - Every text goes in through `visible`: control characters (ESC, BEL, the C1 controls)
//   are shown as escapes (`\x1b`, `\u{9b}`), so a person sees that a file or a name holds
//   them; the rule is the fabric's one (fabric_domain::visible_text, ADR-089).
// - The bearer token lives in this tab's sessionStorage and goes only into the
//   `Authorization` header, never into a URL.
// - Events are drawn in batches, one per animation frame, so a run of thousands of events
//   keeps the page responsive; long texts are cut until asked for.
'use strict';

const TOKEN_KEY = 'fabric.token';
const PAGE_SIZE = 50;
// Texts longer than this (or with more lines) are shown cut, with a button for the rest.
const CUT_CHARS = 1200;
const CUT_LINES = 24;
// Time one animation frame may spend drawing events, in milliseconds.
const FRAME_BUDGET_MS = 10;
// The newest lines of a running call's live output kept on the page (issue #42).
const LIVE_LINES_SHOWN = 200;
const STATUSES = [
  'running', 'completed', 'completed_without_finish', 'partial', 'max_steps_exceeded',
  'budget_exceeded', 'llm_error', 'model_unsupported', 'cancelled', 'failed', 'interrupted',
  'quality_gate_failed', 'context_window_exceeded', 'stalled', 'input_required', 'unanswered',
];
// How often a page looks whether a waiting run was answered (issue #42), in milliseconds.
const WAITING_POLL_MS = 700;
// Lines of one file's diff drawn before a button asks for the rest.
const DIFF_LINES_SHOWN = 400;

// ---------------------------------------------------------------------------------------
// DOM helpers: every node is built here, and text always goes in as text.

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = visible(value);
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : visible(child));
  }
  return node;
}

// Untrusted text as shown: every control character but newline and tab as an escape, as
// the terminal shows it (`\n`, `\t` and `\r` by name, other C0 and DEL as `\xNN`, C1 as
// `\u{NN}`).
function visible(text) {
  return String(text).replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, (c) => {
    const code = c.charCodeAt(0);
    if (c === '\r') return '\\r';
    if (code <= 0x7f) return '\\x' + code.toString(16).padStart(2, '0');
    return '\\u{' + code.toString(16) + '}';
  });
}

function runHref(id) {
  return '#/runs/' + encodeURIComponent(id);
}

function runLink(id, text) {
  return el('a', { href: runHref(id), class: 'run-id', text: text || id });
}

// A run that goes on with an earlier run's conversation (issue #42): a link to that run.
function continuesLine(link) {
  const how = link.mode === 'fork' ? 'Forks the conversation of ' : 'Continues the conversation of ';
  const count = typeof link.messages === 'number' ? ` (${link.messages} messages inherited)` : '';
  return el('div', { class: 'continues' }, how, runLink(String(link.run_id)), count);
}

function statusBadge(status) {
  const known = STATUSES.includes(status) ? status : 'unknown';
  return el('span', { class: 'status s-' + known, text: status || '?' });
}

function when(ts) {
  if (typeof ts !== 'number') return '';
  const d = new Date(ts * 1000);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function duration(seconds) {
  if (typeof seconds !== 'number' || !isFinite(seconds) || seconds < 0) return '';
  if (seconds < 60) return seconds.toFixed(1) + ' s';
  const m = Math.floor(seconds / 60);
  return m + ' min ' + Math.round(seconds - m * 60) + ' s';
}

function number(n) {
  return typeof n === 'number' ? n.toLocaleString('en-US') : '';
}

function json(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch (_) {
    return String(value);
  }
}

// A text in a <pre>, cut when long: the rest is put in only when asked for, so a run with
// hundreds of long tool outputs does not hold them all in the page.
function longText(text, cls) {
  const full = visible(typeof text === 'string' ? text : json(text));
  const pre = el('pre', { class: cls || 'text' });
  const lines = full.split('\n');
  const long = full.length > CUT_CHARS || lines.length > CUT_LINES;
  if (!long) {
    pre.textContent = full;
    return pre;
  }
  const short = lines.length > CUT_LINES
    ? lines.slice(0, CUT_LINES).join('\n').slice(0, CUT_CHARS)
    : full.slice(0, CUT_CHARS);
  pre.textContent = short;
  pre.classList.add('cut');
  const more = el('button', { type: 'button', class: 'link more' });
  const label = () => `show all (${number(full.length)} characters, ${number(lines.length)} lines)`;
  more.textContent = label();
  more.addEventListener('click', () => {
    const open = pre.classList.toggle('cut');
    pre.textContent = open ? short : full;
    more.textContent = open ? label() : 'show less';
  });
  return el('div', { class: 'long' }, pre, more);
}

// ---------------------------------------------------------------------------------------
// The API: every call carries the token when there is one; a 401 asks for it.

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function errorOf(response) {
  const body = await response.json().catch(() => null);
  const error = body && body.error;
  return new ApiError(
    response.status,
    (error && error.code) || 'http_' + response.status,
    (error && error.message) || `the server answered ${response.status}`,
  );
}

async function api(path, options = {}) {
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = new Headers(options.headers || {});
    if (token) headers.set('Authorization', 'Bearer ' + token);
    const response = await fetch(path, {
      method: options.method || 'GET',
      headers,
      body: options.body,
      signal: options.signal,
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
    if (response.status === 401) {
      await askToken(token ? 'The server refused that token; enter it again.' : '');
      continue;
    }
    if (!response.ok) throw await errorOf(response);
    if (options.stream) return response;
    return response.json();
  }
}

let tokenWanted = null;

// Shows the token dialog once, however many requests got a 401 meanwhile; resolves when a
// token was entered.
function askToken(message) {
  if (message) sessionStorage.removeItem(TOKEN_KEY);
  if (tokenWanted) return tokenWanted;
  const dialog = document.getElementById('token-dialog');
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  const error = document.getElementById('token-error');
  error.textContent = message;
  error.hidden = !message;
  input.value = '';
  tokenWanted = new Promise((resolve) => {
    const submitted = (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      input.value = '';
      form.removeEventListener('submit', submitted);
      dialog.close();
      tokenWanted = null;
      showTokenState();
      resolve();
    };
    form.addEventListener('submit', submitted);
  });
  if (!dialog.open) dialog.showModal();
  input.focus();
  document.body.dataset.token = 'asked';
  return tokenWanted;
}

function showTokenState() {
  const has = sessionStorage.getItem(TOKEN_KEY) !== null;
  document.getElementById('forget-token').hidden = !has;
  document.body.dataset.token = has ? 'kept' : 'none';
}

// Reads an SSE response as it arrives and calls `onFrame({id, event, data})` per frame.
// (`EventSource` cannot send an Authorization header, so the stream is read by hand.)
async function readSse(response, onFrame) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let frame = { id: null, event: null, data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n')) >= 0) {
      let line = buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (frame.data.length) onFrame({ id: frame.id, event: frame.event, data: frame.data.join('\n') });
        frame = { id: null, event: null, data: [] };
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let text = colon < 0 ? '' : line.slice(colon + 1);
      if (text.startsWith(' ')) text = text.slice(1);
      if (field === 'data') frame.data.push(text);
      else if (field === 'id') frame.id = text;
      else if (field === 'event') frame.event = text;
    }
  }
}

// Follows a run's events from the start until its terminal event, reconnecting with
// `Last-Event-ID` when the connection drops. Calls `onEvent(event)` in order,
// `onOutput(item)` with a running tool's live output (`event: tool_output`, issue #42: not
// an event, no `seq`), and `onState(text)` with what the follow is doing.
async function followRun(runId, signal, onEvent, onState, onOutput) {
  let last = null;
  let ended = false;
  let waiting = false;
  let wait = 500;
  const path = '/runs/' + encodeURIComponent(runId);
  while (!signal.aborted) {
    try {
      const headers = { Accept: 'text/event-stream' };
      if (last !== null) headers['Last-Event-ID'] = String(last);
      const response = await api(path + '/events', { headers, signal, stream: true });
      if (!waiting) onState('live');
      await readSse(response, (frame) => {
        let event;
        try {
          event = JSON.parse(frame.data);
        } catch (_) {
          return;
        }
        if (frame.event === 'tool_output') {
          if (onOutput) onOutput(event);
          return;
        }
        if (typeof event.seq === 'number') {
          if (last !== null && event.seq <= last) return;
          last = event.seq;
        }
        if (event.kind === 'run_complete' || event.kind === 'run_failed') ended = true;
        if (waiting && event.kind !== 'input_required') {
          waiting = false;
          onState('live');
        }
        onEvent(event);
      });
      if (ended || signal.aborted) break;
      // The stream ended without the run's end: is this server still running it?
      const status = await api(path + '/status', { signal });
      if (status.status === 'input_required') {
        // A waiting run's stream ends at its question (issue #42): looked at again every
        // WAITING_POLL_MS (at once when this page answered, `nudge`) from the last event
        // drawn, so the run going on is followed, up to its next question or its end.
        if (!waiting) onState('waiting');
        waiting = true;
        await nap(WAITING_POLL_MS, signal);
        wait = 500;
        continue;
      }
      if (!status.live) {
        onState('not-live');
        return;
      }
      wait = 500;
      await sleep(200, signal);
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError && error.status < 500) {
        onState('error', error.message);
        return;
      }
      onState('reconnecting', error.message);
      await sleep(wait, signal);
      wait = Math.min(wait * 2, 10000);
    }
  }
  if (ended) onState('ended');
}

const napping = new Set();

// Ends every `nap` at once: this page answered a waiting run.
function nudge() {
  for (const wake of [...napping]) wake();
}

function nap(ms, signal) {
  return new Promise((resolve) => {
    const wake = () => {
      clearTimeout(timer);
      napping.delete(wake);
      resolve();
    };
    const timer = setTimeout(wake, ms);
    napping.add(wake);
    if (signal) signal.addEventListener('abort', wake, { once: true });
  });
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

// ---------------------------------------------------------------------------------------
// Pages. Each page gets a fresh AbortController; leaving the page aborts its requests,
// streams and timers.

let page = new AbortController();
const view = () => document.getElementById('view');

function showPage(name, ...children) {
  document.body.dataset.view = name;
  document.body.removeAttribute('data-run-state');
  document.body.removeAttribute('data-drawn');
  view().replaceChildren(...children);
}

function errorBox(error) {
  return el('p', { class: 'error', role: 'alert', text: error.message || String(error) });
}

function route() {
  page.abort();
  page = new AbortController();
  const hash = location.hash || '#/';
  const [path, query] = hash.slice(1).split('?');
  const params = new URLSearchParams(query || '');
  const run = /^\/runs\/([^/]+)$/.exec(path);
  if (run) return showRun(decodeURIComponent(run[1]), page.signal);
  if (path === '/new') return showNewRun(page.signal);
  return showList(params, page.signal);
}

// ---- the runs list ---------------------------------------------------------------------

function listHash(params) {
  const clean = new URLSearchParams();
  for (const [key, value] of params) if (value) clean.set(key, value);
  const text = clean.toString();
  return '#/' + (text ? '?' + text : '');
}

function filterForm(params) {
  const q = el('input', { id: 'q', name: 'q', type: 'search', placeholder: 'search prompts, results, tool calls…', value: params.get('q') || '' });
  const status = el('select', { id: 'status-filter', name: 'status' },
    el('option', { value: '', text: 'any status' }),
    STATUSES.map((s) => el('option', { value: s, text: s, selected: params.get('status') === s })));
  const specialist = el('input', { id: 'specialist-filter', name: 'specialist', placeholder: 'any specialist', list: 'specialist-names', value: params.get('specialist') || '' });
  const form = el('form', { id: 'filter-form', class: 'filters', role: 'search' },
    q, status, specialist,
    el('button', { type: 'submit', text: 'Apply' }),
    el('a', { href: '#/', class: 'link', text: 'Clear' }),
    specialistList());
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const next = listHash(new URLSearchParams([
      ['q', q.value.trim()], ['status', status.value], ['specialist', specialist.value.trim()],
    ]));
    if (next === location.hash) route();
    else location.hash = next;
  });
  status.addEventListener('change', () => form.requestSubmit());
  return form;
}

const knownSpecialists = new Set((() => {
  try {
    const names = JSON.parse(sessionStorage.getItem('fabric.specialists') || '[]');
    return Array.isArray(names) ? names : [];
  } catch (_) {
    return [];
  }
})());

function learnSpecialists(ids) {
  const before = knownSpecialists.size;
  for (const id of ids || []) if (typeof id === 'string') knownSpecialists.add(id);
  if (knownSpecialists.size !== before) {
    sessionStorage.setItem('fabric.specialists', JSON.stringify([...knownSpecialists].slice(0, 200)));
  }
}

function specialistList() {
  return el('datalist', { id: 'specialist-names' },
    [...knownSpecialists].sort().map((id) => el('option', { value: id })));
}

function runRow(run, snippet) {
  const started = run.started_at;
  const took = typeof run.ended_at === 'number' ? duration(run.ended_at - started) : 'running';
  const prompt = el('td', { class: 'prompt', title: run.prompt || '' },
    el('a', { href: runHref(run.run_id), class: 'plain', text: run.prompt || '(no prompt)' }));
  if (run.summary) prompt.append(el('div', { class: 'muted summary', text: run.summary }));
  if (snippet) prompt.append(el('div', { class: 'snippet', text: snippet }));
  const idCell = el('td', {}, runLink(run.run_id));
  if (run.parent_id) idCell.append(el('div', { class: 'muted' }, 'sub-run of ', runLink(run.parent_id)));
  return el('tr', { 'data-run': run.run_id, 'data-status': run.status },
    el('td', {}, statusBadge(run.status)),
    idCell,
    el('td', { class: 'nowrap' }, when(started), el('div', { class: 'muted', text: took })),
    el('td', { class: 'specialists', text: (run.specialist_ids || []).join(', ') }),
    el('td', { class: 'num', text: run.steps === undefined ? '' : number(run.steps) }),
    el('td', { class: 'num', text: run.tokens === undefined ? '' : number(run.tokens) }),
    prompt);
}

function runsTable(rows) {
  return el('table', { id: 'runs', class: 'runs' },
    el('thead', {}, el('tr', {},
      ['Status', 'Run', 'Started', 'Specialists', 'Steps', 'Tokens', 'Prompt'].map((h) => el('th', { text: h })))),
    el('tbody', {}, rows));
}

async function showList(params, signal) {
  const results = el('section', { id: 'results' }, el('p', { class: 'muted', text: 'Loading runs…' }));
  showPage('list', el('h1', { text: 'Runs' }), filterForm(params), results);
  const q = params.get('q');
  const query = new URLSearchParams();
  for (const key of ['status', 'specialist']) if (params.get(key)) query.set(key, params.get(key));
  try {
    let rows;
    let pager = null;
    let note = null;
    let runs;
    if (q) {
      query.set('q', q);
      query.set('limit', String(PAGE_SIZE));
      const found = await api('/runs/search?' + query, { signal });
      runs = found.hits.map((hit) => hit.run);
      rows = found.hits.map((hit) => runRow(hit.run, hit.snippet));
      note = el('p', { class: 'muted' }, `${found.hits.length} found (${found.mode} search)`,
        found.note ? ' · ' + found.note : '');
    } else {
      query.set('limit', String(PAGE_SIZE));
      if (params.get('before')) query.set('before', params.get('before'));
      const listed = await api('/runs?' + query, { signal });
      runs = listed.runs;
      rows = listed.runs.map((run) => runRow(run));
      pager = el('nav', { class: 'pager' });
      if (params.get('before')) {
        const newest = new URLSearchParams(params);
        newest.delete('before');
        pager.append(el('a', { id: 'newest', href: listHash(newest), text: '← Newest' }));
      }
      if (listed.next_before) {
        const older = new URLSearchParams(params);
        older.set('before', listed.next_before);
        pager.append(el('a', { id: 'older', href: listHash(older), text: 'Older →' }));
      }
    }
    if (signal.aborted) return;
    for (const run of runs) learnSpecialists(run.specialist_ids);
    const empty = q || params.get('status') || params.get('specialist')
      ? 'No run matches.'
      : 'No runs yet.';
    results.replaceChildren(
      note || '',
      rows.length ? runsTable(rows) : el('p', { class: 'muted empty' }, empty, ' ', el('a', { href: '#/new', text: 'Start one.' })),
      pager || '');
    document.body.dataset.listed = String(rows.length);
    performance.mark('fabric:list-rendered');
    // While runs on the first page are going, keep the page current.
    if (!q && !params.get('before') && runs.some((run) => run.status === 'running')) {
      await sleep(3000, signal);
      if (!signal.aborted) refreshList(params, signal);
    }
  } catch (error) {
    if (!signal.aborted) results.replaceChildren(errorBox(error));
  }
}

async function refreshList(params, signal) {
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  for (const key of ['status', 'specialist']) if (params.get(key)) query.set(key, params.get(key));
  try {
    const listed = await api('/runs?' + query, { signal });
    if (signal.aborted) return;
    const table = document.getElementById('runs');
    if (table) table.tBodies[0].replaceChildren(...listed.runs.map((run) => runRow(run)));
    if (listed.runs.some((run) => run.status === 'running')) {
      await sleep(3000, signal);
      if (!signal.aborted) refreshList(params, signal);
    }
  } catch (_) {
    // The next visit shows the error; a failed refresh keeps what is shown.
  }
}

// ---- starting a run --------------------------------------------------------------------

function showNewRun(signal) {
  const prompt = el('textarea', { id: 'prompt', rows: 6, required: true, placeholder: 'What should the agents do?' });
  const pack = el('input', { id: 'pack', list: 'specialist-names', placeholder: 'routed by the server', autocomplete: 'off' });
  const modelKey = el('input', { id: 'model-key', placeholder: 'the specialist\'s', autocomplete: 'off' });
  const maxSteps = el('input', { id: 'max-steps', type: 'number', min: 1, max: 1000, placeholder: 'the server\'s' });
  const error = el('div', { id: 'new-error' });
  const submit = el('button', { type: 'submit', id: 'start', text: 'Start the run' });
  const form = el('form', { id: 'new-form', class: 'card' },
    el('label', { for: 'prompt', text: 'Prompt' }), prompt,
    el('label', { for: 'pack', text: 'Specialist, or a task force as a,b' }), pack,
    el('div', { class: 'row' },
      el('div', {}, el('label', { for: 'model-key', text: 'Model key' }), modelKey),
      el('div', {}, el('label', { for: 'max-steps', text: 'Most steps' }), maxSteps)),
    error,
    el('div', { class: 'actions' }, submit),
    specialistList());
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = { prompt: prompt.value };
    if (pack.value.trim()) body.pack = pack.value.trim();
    if (modelKey.value.trim()) body.model_key = modelKey.value.trim();
    if (maxSteps.value) body.max_steps = Number(maxSteps.value);
    submit.disabled = true;
    submit.textContent = 'Preparing the run…';
    error.replaceChildren();
    try {
      const accepted = await api('/runs', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
        signal,
      });
      location.hash = runHref(accepted.run_id);
    } catch (failure) {
      if (signal.aborted) return;
      error.replaceChildren(errorBox(failure));
      submit.disabled = false;
      submit.textContent = 'Start the run';
    }
  });
  showPage('new', el('h1', { text: 'Start a run' }), form);
  prompt.focus();
  // The specialists run so far, as suggestions.
  api('/stats?by=specialist', { signal })
    .then((stats) => {
      learnSpecialists((stats.rows || []).map((row) => row.key));
      form.querySelector('datalist').replaceWith(specialistList());
    })
    .catch(() => {});
}

// ---- one run ---------------------------------------------------------------------------

// What the header of a run page shows, kept current as events arrive.
class RunHeader {
  constructor(runId, signal) {
    this.runId = runId;
    this.status = el('span', { id: 'run-status' }, statusBadge('running'));
    this.live = el('span', { id: 'live', class: 'live', hidden: true, text: '● live' });
    this.cancel = el('button', { id: 'cancel', type: 'button', class: 'danger', hidden: true, text: 'Cancel run' });
    this.cancelNote = el('span', { id: 'cancel-note', class: 'muted' });
    this.parent = el('span', { id: 'parent' });
    this.prompt = el('div', { id: 'prompt-text' });
    this.facts = el('dl', { class: 'facts' });
    this.values = {};
    for (const [key, label] of [['specialists', 'Specialists'], ['model', 'Model'], ['started', 'Started'], ['took', 'Took'], ['steps', 'Steps'], ['tokens', 'Tokens'], ['events', 'Events']]) {
      this.values[key] = el('dd', { id: 'fact-' + key });
      this.facts.append(el('div', {}, el('dt', { text: label }), this.values[key]));
    }
    this.cancel.addEventListener('click', () => this.doCancel(signal));
    this.node = el('section', { class: 'card run-head' },
      el('div', { class: 'title' },
        el('h1', {}, 'Run ', el('span', { class: 'mono', text: runId })),
        this.status, this.live, el('span', { class: 'spacer' }), this.cancelNote, this.cancel),
      this.parent, this.prompt, this.facts);
  }

  set(key, value) {
    this.values[key].textContent = visible(value);
  }

  setStatus(status) {
    this.current = status;
    this.status.replaceChildren(statusBadge(status));
    document.body.dataset.runState = status === 'running' ? 'running' : status === 'input_required' ? 'waiting' : 'ended';
    document.body.dataset.runStatus = status;
    this.cancel.hidden = status !== 'running';
    if (this.onStatus) this.onStatus(status);
  }

  async doCancel(signal) {
    this.cancel.disabled = true;
    this.cancel.textContent = 'Cancelling…';
    try {
      await api('/runs/' + encodeURIComponent(this.runId) + '/cancel', { method: 'POST', signal });
      this.cancelNote.textContent = 'cancel requested';
    } catch (error) {
      this.cancelNote.textContent = visible(error.message);
      this.cancel.disabled = false;
      this.cancel.textContent = 'Cancel run';
    }
  }
}

// The timeline of one run's events: its own list, calls matched with their results, and
// the runs it delegated to. A run page has one; a sub-run shown inside it has its own.
class Timeline {
  constructor(runId, signal, hooks) {
    this.runId = runId;
    this.signal = signal;
    this.hooks = hooks || {};
    this.list = el('ol', { class: 'events' });
    this.activity = el('div', { class: 'activity muted' });
    this.node = el('div', { class: 'timeline' }, this.list, this.activity);
    this.queue = [];
    this.next = 0;
    this.scheduled = false;
    this.calls = new Map();
    this.stepKey = null;
    this.stepMeta = null;
    this.members = [];
    this.taskForce = false;
    this.pendingAgents = 0;
    // The "sub-agent working" marks of this run's own calls (not of runs nested in it).
    this.waits = [];
    this.children = new Set();
    this.count = 0;
  }

  start() {
    followRun(this.runId, this.signal, (event) => this.push(event), (state, detail) => {
      if (this.hooks.onState) this.hooks.onState(state, detail);
      if (state === 'not-live') this.activity.textContent = 'This server is not running this run: its runlog has no end (its process stopped, or another process runs it).';
      else if (state === 'reconnecting') this.activity.textContent = 'Connection lost; reconnecting…';
      else if (state === 'error') this.activity.replaceChildren(errorBox({ message: detail }));
    }, (output) => this.push({ live: output }));
    return this;
  }

  push(event) {
    this.queue.push(event);
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }

  // Draws queued events until the frame's budget is spent, in one DOM append.
  flush() {
    this.scheduled = false;
    const started = performance.now();
    const fragment = document.createDocumentFragment();
    while (this.next < this.queue.length && performance.now() - started < FRAME_BUDGET_MS) {
      const event = this.queue[this.next];
      this.queue[this.next] = null;
      this.next += 1;
      // A running tool's live line goes under its call, in the order it came among events.
      if (event.live) {
        this.liveOutput(event.live);
        continue;
      }
      this.count += 1;
      try {
        this.render(event, fragment);
      } catch (error) {
        fragment.append(el('li', { class: 'ev ev-unknown' }, 'cannot show this event: ' + error.message));
      }
      if (this.hooks.onEvent) this.hooks.onEvent(event);
    }
    this.list.append(fragment);
    if (this.next >= this.queue.length) {
      this.queue = [];
      this.next = 0;
    } else {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
    if (this.hooks.onFlush) this.hooks.onFlush(this);
  }

  member(event) {
    const index = event.payload && event.payload.pack_index;
    if (!this.taskForce || typeof index !== 'number') return null;
    return el('span', { class: 'member m' + (index % 6), text: this.members[index] || 'member ' + index });
  }

  // Events of a step are under its heading, which names the member; others name it here.
  row(event, cls, ...children) {
    return el('li', { class: 'ev ev-' + event.kind + (cls ? ' ' + cls : ''), 'data-seq': event.seq, 'data-kind': event.kind },
      typeof event.step === 'number' ? null : this.member(event), children);
  }

  // A step's heading, once per member and step.
  stepRow(event, out) {
    if (typeof event.step !== 'number') return;
    const index = event.payload && event.payload.pack_index;
    const key = (typeof index === 'number' ? index : '') + ':' + event.step;
    if (key === this.stepKey) return;
    this.stepKey = key;
    this.stepMeta = el('span', { class: 'muted' });
    out.append(el('li', { class: 'step' }, this.member(event), 'Step ' + (event.step + 1), ' ', this.stepMeta));
  }

  render(event, out) {
    const p = event.payload || {};
    if (event.kind !== 'run_start' && event.kind !== 'recruitment') this.stepRow(event, out);
    switch (event.kind) {
      case 'run_start': {
        const row = this.row(event, 'info', 'Started · model ', el('b', { text: p.model || '?' }),
          p.model_key ? ` (${p.model_key})` : '', typeof p.max_steps === 'number' ? ` · at most ${p.max_steps} steps` : '',
          p.sandbox && p.sandbox.mode ? ` · sandbox ${p.sandbox.mode}` : '');
        if (p.parent_run_id) row.append(el('div', {}, 'Delegated by ', runLink(p.parent_run_id)));
        if (p.continues && p.continues.run_id) row.append(continuesLine(p.continues));
        out.append(row);
        break;
      }
      case 'recruitment':
        this.members = Array.isArray(p.specialist_ids) ? p.specialist_ids : [];
        this.taskForce = Boolean(p.is_task_force);
        out.append(this.row(event, 'info', 'Recruited ', el('b', { text: this.members.join(', ') }),
          p.routing_method ? ` by ${p.routing_method}` : '', p.task_force_mode && p.task_force_mode !== 'single' ? ` · ${p.task_force_mode} task force` : '',
          p.reason ? el('div', { class: 'muted', text: p.reason }) : ''));
        break;
      case 'task_force_parallel':
        out.append(this.row(event, 'info', `Parallel task force: ${(p.specialist_ids || []).join(', ')} (at most ${p.max_parallel} at once)`));
        break;
      case 'pack_start':
        out.append(this.row(event, 'member-start', '▶ ', el('b', { text: p.specialist_id || '?' }),
          p.model ? ` on ${p.model}` : '', p.handoff_from ? ` · handed over from ${p.handoff_from}` : '',
          Array.isArray(p.tools) ? el('div', { class: 'muted tools', text: 'tools: ' + p.tools.join(', ') }) : ''));
        break;
      case 'llm_request':
        if (p.purpose === 'routing') out.append(this.row(event, 'info', `Routing call to ${p.model || 'the routing model'}`));
        this.activity.textContent = 'waiting for the model…';
        break;
      case 'llm_response': {
        const usage = p.usage && typeof p.usage.total_tokens === 'number' ? p.usage.total_tokens : null;
        const meta = [typeof p.latency_ms === 'number' ? duration(p.latency_ms / 1000) : '', usage !== null ? number(usage) + ' tokens' : '', p.finish_reason || ''].filter(Boolean).join(' · ');
        if (this.stepMeta && p.purpose !== 'routing') this.stepMeta.textContent = visible(meta);
        if (p.error) out.append(this.row(event, 'warn', 'The routing answer was not used: ', p.error));
        const text = p.full_content || p.content;
        if (text) out.append(this.row(event, 'say', el('span', { class: 'who', text: 'model' }), longText(text, 'text say-text')));
        this.activity.textContent = '';
        break;
      }
      case 'tool_call':
        out.append(this.toolCall(event));
        break;
      case 'tool_result':
      case 'tool_error':
        this.toolEnd(event, out);
        break;
      case 'security_event': {
        const row = this.row(event, 'security', el('b', { text: '⚠ security: ' + (p.event_type || 'refused') }),
          p.tool ? ` · ${p.tool}` : '',
          p.attempted ? el('div', {}, 'attempted: ', el('code', { text: typeof p.attempted === 'string' ? p.attempted : json(p.attempted) })) : '',
          p.error_message ? el('div', { text: p.error_message }) : '');
        const call = p.call_id && this.calls.get(this.callKey(event, p.call_id));
        if (call) {
          call.node.classList.add('has-security');
          call.node.append(row);
        } else {
          out.append(row);
        }
        if (this.hooks.onSecurity) this.hooks.onSecurity(event);
        break;
      }
      case 'critic_review':
        out.append(this.row(event, p.approved ? 'ok' : 'warn',
          el('b', { text: `Critic ${p.critic || ''}, round ${p.round}/${p.max_rounds}: ${p.approved ? 'approved' : 'rejected'}` }),
          Array.isArray(p.findings) && p.findings.length
            ? el('ul', { class: 'findings' }, p.findings.map((f) => el('li', {}, el('b', { text: f.severity || '' }), ' ', el('code', { text: f.file || '' }), ' ', f.reason || '')))
            : '',
          Array.isArray(p.files) ? el('div', { class: 'muted', text: 'files: ' + p.files.join(', ') }) : '',
          p.critic_run_id ? this.child(p.critic_run_id, 'critic run') : ''));
        break;
      case 'repair_round':
        out.append(this.row(event, 'warn', `Repair round ${p.round}/${p.max_rounds}`, p.model_key ? ` on ${p.model_key}` : ''));
        break;
      case 'corrective_reprompt':
        out.append(this.row(event, 'warn', `Asked the model to use its tools (attempt ${p.attempt}/${p.max_retries})`, p.reason ? ': ' + p.reason : ''));
        break;
      case 'cloud_fallback':
        out.append(this.row(event, 'warn', `Cloud fallback (${p.reason}): ${p.local_model} → ${p.cloud_model}`));
        break;
      case 'context_compacted':
        out.append(this.row(event, 'info', `Context compacted (${p.mode}): ${number(p.tokens_before)} → ${number(p.tokens_after)} tokens`));
        break;
      case 'tool_call_repaired':
        out.append(this.row(event, 'info', `Tool calls recovered from text (${p.format}): ${(p.tools || []).join(', ')}`));
        break;
      case 'mcp_server':
        out.append(this.row(event, p.status === 'failed' || p.status === 'timeout' ? 'error' : 'info',
          `MCP server ${p.server}: ${p.status}`, Array.isArray(p.tools) ? ` (${p.tools.length} tools)` : '',
          p.error ? longText(p.error, 'text') : ''));
        break;
      case 'mcp_message':
        out.append(this.row(event, p.level === 'error' || p.level === 'warning' ? 'error' : 'info',
          p.type === 'progress'
            ? `MCP server ${p.server}: ${p.progress}${typeof p.total === 'number' ? '/' + p.total : ''}${p.tool ? ' (' + p.tool + ')' : ''}`
            : `MCP server ${p.server} [${p.level || 'log'}]`,
          p.message ? longText(p.message, 'text') : ''));
        break;
      case 'mcp_request':
        out.append(this.row(event, p.outcome === 'answered' ? 'info' : 'error',
          `MCP server ${p.server} asked ${p.method}: ${p.outcome}`,
          p.model ? ` (by ${p.model}${p.usage ? ', ' + p.usage.total_tokens + ' tokens' : ''})` : '',
          p.reason ? longText(p.reason, 'text') : ''));
        break;
      case 'workspace':
        out.append(this.row(event, 'info workspace', workspaceLine(p)));
        break;
      case 'checkpoint':
        this.underCall(event, out, this.row(event, 'checkpoint', checkpointLine(p, this.hooks.onCheckpoint)));
        break;
      case 'input_required':
        this.underCall(event, out, this.row(event, 'asked', askedLine(p)));
        this.activity.textContent = p.input === 'approval' ? 'waiting for a person\'s approval…' : 'waiting for a person\'s answer…';
        break;
      case 'input_answered':
        this.underCall(event, out, this.row(event, p.decision === 'deny' ? 'warn' : 'ok', answeredLine(p)));
        this.activity.textContent = '';
        break;
      case 'user_message':
        out.append(this.row(event, 'say person', el('span', { class: 'who', text: 'person' + (p.by ? ' · ' + p.by : '') }),
          longText(typeof p.text === 'string' ? p.text : '', 'text say-text')));
        break;
      case 'hook_run':
        out.append(this.row(event, ['ok', 'allowed', 'rewritten'].includes(p.outcome) ? 'info' : (['denied', 'blocked', 'asked', 'stopped'].includes(p.outcome) ? 'warn' : 'error'),
          `Hook ${p.event} (${p.source}): ${p.outcome}`, typeof p.duration_ms === 'number' ? ` in ${p.duration_ms} ms` : '',
          el('div', { class: 'muted', text: typeof p.command === 'string' ? p.command : '' }),
          p.message || p.stop_reason || p.detail ? longText(p.message || p.stop_reason || p.detail, 'text') : '',
          typeof p.system_message === 'string' ? el('div', { text: '⚠ ' + p.system_message }) : ''));
        break;
      case 'run_resumed':
        out.append(this.row(event, 'info', `Continued from its runlog (resumption ${p.resumption}; ${p.replayed_steps} steps replayed): after a stop, or an answer`));
        break;
      case 'pack_end':
        out.append(this.row(event, 'member-end', '■ ', el('b', { text: p.specialist_id || '?' }), ' ended ', statusBadge(p.status),
          typeof p.steps === 'number' ? ` · ${p.steps} steps` : '', p.reason ? el('div', { class: 'muted', text: p.reason }) : ''));
        break;
      case 'run_complete':
      case 'run_failed':
        this.activity.textContent = '';
        out.append(this.row(event, event.kind === 'run_complete' ? 'end-ok' : 'end-failed',
          event.kind === 'run_complete' ? 'Ended ' : 'Failed ', statusBadge(p.status),
          typeof p.steps === 'number' ? ` after ${p.steps} steps` : '',
          p.usage && typeof p.usage.total_tokens === 'number' ? ` · ${number(p.usage.total_tokens)} tokens` : '',
          p.reason ? el('div', { text: p.reason }) : ''));
        break;
      default:
        out.append(this.row(event, 'info', el('b', { text: event.kind }), ' ', longText(p, 'text')));
    }
  }

  // A row about a call (its checkpoint, its question or approval): under the call when it is
  // drawn, else in the list.
  underCall(event, out, row) {
    const p = event.payload || {};
    const call = p.call_id && this.calls.get(this.callKey(event, p.call_id));
    if (call) call.node.append(row);
    else out.append(row);
  }

  callKey(event, callId) {
    const index = event.payload && event.payload.pack_index;
    return (typeof index === 'number' ? index : '') + ':' + callId;
  }

  toolCall(event) {
    const p = event.payload || {};
    const args = p.args;
    const body = el('div', { class: 'args' });
    if (args && typeof args === 'object' && !Array.isArray(args)) {
      for (const [key, value] of Object.entries(args)) {
        // Short values on one line (`["ls", "-la"]`), long ones in a block, cut.
        const compact = typeof value === 'string' ? value : JSON.stringify(value);
        const short = compact.length <= 120 && !compact.includes('\n');
        body.append(el('div', { class: 'arg' }, el('span', { class: 'key', text: key }),
          short ? el('code', { class: 'value', text: compact })
            : longText(typeof value === 'string' ? value : json(value), 'text value')));
      }
    } else if (args !== undefined && args !== null) {
      body.append(longText(typeof args === 'string' ? args : json(args), 'text'));
    }
    const node = this.row(event, 'call', el('div', { class: 'call-head' }, '→ ', el('b', { class: 'tool', text: p.tool || '?' })), body);
    const call = { node, event, wait: null };
    if (p.call_id) this.calls.set(this.callKey(event, p.call_id), call);
    if (typeof p.tool === 'string' && p.tool.startsWith('agent__')) {
      this.pendingAgents += 1;
      call.wait = el('div', { class: 'muted child-wait', text: 'sub-agent working…' });
      this.waits.push(call.wait);
      node.append(call.wait);
      this.watchChildren();
    }
    this.activity.textContent = visible(`running ${p.tool || 'a tool'}…`);
    return node;
  }

  // A line a running call printed (issue #42), under the call; its result replaces them.
  liveOutput(output) {
    const key = (typeof output.member === 'number' ? output.member : '') + ':' + output.call_id;
    const call = this.calls.get(key);
    if (!call || call.ended) return;
    if (!call.live) {
      call.live = el('pre', { class: 'live-output', 'data-call': output.call_id });
      call.node.append(call.live);
    }
    const line = typeof output.line === 'string'
      ? el('span', { class: 'line ' + (output.stream === 'stderr' ? 'stderr' : 'stdout'), text: output.line })
      : el('span', { class: 'line dropped', text: `… ${number(output.dropped || 0)} lines not shown (live output is rate-limited)` });
    call.live.append(line, '\n');
    // The newest lines only: a long command's output is in its result.
    while (call.live.childNodes.length > 2 * LIVE_LINES_SHOWN) {
      call.live.firstChild.remove();
      call.live.firstChild.remove();
    }
    call.live.scrollTop = call.live.scrollHeight;
  }

  toolEnd(event, out) {
    const p = event.payload || {};
    // The call stays known after its end: a `security_event` about it comes after.
    const call = this.calls.get(this.callKey(event, p.call_id));
    if (call) {
      call.ended = true;
      if (call.live) call.live.remove();
    }
    let node;
    if (event.kind === 'tool_result') {
      node = el('div', { class: 'result ok', 'data-seq': event.seq }, el('span', { class: 'mark', text: '✓ ' }));
      if (p.tool === 'finish_task') node.append('finish accepted');
      else node.append(longText(p.result === undefined ? '' : p.result, 'text'));
    } else {
      node = el('div', { class: 'result error', 'data-seq': event.seq },
        el('b', { text: '✗ ' + (p.error_type || 'error') + ': ' }), longText(p.error_message || '', 'text'));
    }
    let nested = null;
    if (typeof p.tool === 'string' && p.tool.startsWith('agent__')) {
      this.pendingAgents = Math.max(0, this.pendingAgents - 1);
      const child = childOf(p);
      if (child) nested = this.child(child.run_id, 'sub-agent ' + p.tool.slice('agent__'.length), child);
      if (call && call.wait) {
        call.wait.remove();
        this.waits = this.waits.filter((wait) => wait !== call.wait);
      }
    }
    if (call) {
      call.node.append(node, nested || '');
      call.node.classList.add(event.kind === 'tool_result' ? 'done' : 'failed');
      if (event.kind === 'tool_result' && this.hooks.onWrite && call.event.payload.tool === 'write_file') {
        this.hooks.onWrite(call.event);
      }
    } else {
      out.append(this.row(event, event.kind === 'tool_result' ? '' : 'error', node, nested));
    }
    this.activity.textContent = '';
  }

  // A run this one started (a sub-agent, a critic): a link, and its own timeline on demand.
  child(runId, label, known) {
    this.children.add(runId);
    const summary = el('summary', {}, el('span', { class: 'label', text: label }), ' · ', runLink(runId),
      known && known.status ? [' ', statusBadge(known.status)] : '');
    const details = el('details', { class: 'child', 'data-child': runId }, summary);
    const text = known && known.result && typeof known.result === 'object' && known.result.summary;
    if (text) details.append(el('div', { class: 'muted', text }));
    details.addEventListener('toggle', () => {
      if (details.open && !details.dataset.loaded) {
        details.dataset.loaded = 'yes';
        details.append(new Timeline(runId, this.signal).start().node);
      }
    }, { once: false });
    return details;
  }

  // While a sub-agent works, its run is found among the newest runs by its parent.
  async watchChildren() {
    if (this.watching) return;
    this.watching = true;
    while (this.pendingAgents > 0 && !this.signal.aborted) {
      try {
        const listed = await api('/runs?limit=20&status=running', { signal: this.signal });
        for (const run of listed.runs) {
          if (run.parent_id !== this.runId || this.children.has(run.run_id)) continue;
          const waiting = this.waits.find((w) => !w.dataset.found);
          if (!waiting) break;
          waiting.dataset.found = 'yes';
          waiting.replaceChildren(this.child(run.run_id, 'sub-agent working', { status: 'running' }));
        }
      } catch (_) {
        // A failed look is retried; the link also comes with the call's result.
      }
      await sleep(1500, this.signal);
    }
    this.watching = false;
  }
}

// ---- a person at work (issue #42) -----------------------------------------------------

function shortCommit(commit) {
  return typeof commit === 'string' ? commit.slice(0, 12) : '?';
}

// Where a versioned run works (its `workspace` event): its branch, its base, its repository.
function workspaceLine(p) {
  const where = p.origin === 'project'
    ? ['on ', el('code', { class: 'repo', text: p.repo || '?' })]
    : p.origin === 'copy'
      ? ['on a copy of ', el('code', { class: 'repo', text: p.source || '?' })]
      : ['in a scratch workspace with history'];
  return el('span', {}, 'Works ', where, ' · branch ', el('code', { class: 'branch', text: p.branch || '?' }),
    ' from ', el('code', { class: 'base', text: shortCommit(p.base) }), p.base_ref ? ` (${p.base_ref})` : '',
    p.owner ? [' · on the worktree of ', runLink(String(p.owner))] : '',
    p.restored_to ? [' · files at ', el('code', { text: shortCommit(p.restored_to) })] : '');
}

// A checkpoint: its commit, with a button showing its changes when the page can.
function checkpointLine(p, onShow) {
  if (!p.commit) {
    return el('span', { class: 'muted' }, 'No recorded file changed',
      Array.isArray(p.ignored) && p.ignored.length ? ` · ignored: ${p.ignored.join(', ')}` : '');
  }
  const show = onShow
    ? el('button', { type: 'button', class: 'link show-checkpoint', 'data-commit': p.commit, text: 'show its changes', onclick: () => onShow(p.commit) })
    : '';
  return el('span', {}, '◆ checkpoint ', el('code', { class: 'commit', text: shortCommit(p.commit) }), ' ', show,
    Array.isArray(p.ignored) && p.ignored.length ? el('div', { class: 'muted', text: 'not recorded (.gitignore): ' + p.ignored.join(', ') }) : '',
    Array.isArray(p.removed_git) && p.removed_git.length ? el('div', { class: 'muted', text: 'removed: ' + p.removed_git.join(', ') }) : '',
    p.pushed === false ? el('div', { class: 'muted', text: 'not pushed to the remote yet' }) : '');
}

// What a run waits for (`input_required`).
function askedLine(p) {
  if (p.input === 'approval') {
    return el('span', {}, el('b', { text: 'Waits for approval' }), ` of ${p.tool || 'a call'}`,
      p.question ? el('div', { class: 'muted', text: p.question }) : '');
  }
  return el('span', {}, el('b', { text: '? ' }), el('span', { class: 'question', text: p.question || '' }),
    Array.isArray(p.choices) && p.choices.length ? el('div', { class: 'muted', text: 'choices: ' + p.choices.join(' | ') }) : '');
}

// A person's answer (`input_answered`).
function answeredLine(p) {
  const by = p.by ? ` (by ${p.by})` : '';
  if (p.decision) {
    const said = { approve: '✓ approved', approve_for_run: '✓ approved for the rest of the run', deny: '✗ denied' }[p.decision] || p.decision;
    // The page sends the decision as the answer when no reason was given: not repeated.
    const reason = p.answer && p.answer !== p.decision ? p.answer : '';
    return el('span', {}, el('b', { text: said }), by, reason ? el('div', { class: 'answer', text: reason }) : '');
  }
  return el('span', {}, el('b', { text: 'answered' }), by, ': ', el('span', { class: 'answer', text: p.answer || '' }));
}

function jsonPost(path, body, signal) {
  return api(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal });
}

// The question or the approval a waiting run asks, with the means to answer it.
class AttendCard {
  constructor(runId, signal) {
    this.runId = runId;
    this.signal = signal;
    this.asked = null;
    this.node = el('section', { class: 'card attend', id: 'attend-card', hidden: true });
  }

  show(event) {
    const p = event.payload || {};
    this.asked = event.seq;
    this.error = el('div', { id: 'attend-error' });
    this.note = el('div', { id: 'attend-note', class: 'muted' });
    const expires = typeof p.expires_at === 'number' ? el('div', { class: 'muted', text: `Unanswered, the run ends at ${when(p.expires_at)}.` }) : '';
    const body = p.input === 'approval' ? this.approval(p) : this.question(p);
    this.node.replaceChildren(...body, expires, this.error, this.note);
    this.node.hidden = false;
    this.node.dataset.input = p.input || 'question';
    this.node.dataset.asked = String(event.seq);
    delete this.node.dataset.sent;
    // The page may have followed the run down: the question is what matters now.
    this.node.scrollIntoView({ block: 'center' });
  }

  question(p) {
    const text = el('textarea', { id: 'answer-text', rows: 3, placeholder: 'Your answer' });
    const form = el('form', { id: 'answer-form' }, el('label', { for: 'answer-text', text: 'Answer' }), text,
      el('div', { class: 'actions' }, el('button', { type: 'submit', id: 'answer-send', text: 'Send the answer' })));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.send({ answer: text.value });
    });
    const choices = Array.isArray(p.choices) && p.choices.length
      ? el('div', { class: 'choices' }, p.choices.map((choice) => el('button', {
        type: 'button', class: 'choice', text: String(choice), onclick: () => this.send({ answer: String(choice) }),
      })))
      : '';
    return [el('h2', { text: 'The run asks you' }), el('p', { id: 'question', class: 'question-text', text: p.question || '' }), choices, form];
  }

  approval(p) {
    const reason = el('input', { id: 'deny-reason', placeholder: 'why (the model gets it)', autocomplete: 'off' });
    const decide = (decision) => () => {
      const why = reason.value.trim();
      this.send({ answer: why || decision, decision });
    };
    const args = p.arguments === undefined ? '' : longText(json(p.arguments), 'text approval-args');
    return [
      el('h2', {}, 'The run asks to call ', el('code', { id: 'approval-tool', text: p.tool || '?' })),
      p.question ? el('p', { class: 'muted', text: p.question }) : '',
      args,
      el('label', { for: 'deny-reason', text: 'Reason' }), reason,
      el('div', { class: 'actions' },
        el('button', { type: 'button', id: 'approve', class: 'ok', text: 'Approve', onclick: decide('approve') }),
        el('button', { type: 'button', id: 'approve-for-run', text: 'Approve for this run', onclick: decide('approve_for_run') }),
        el('button', { type: 'button', id: 'deny', class: 'danger', text: 'Deny', onclick: decide('deny') })),
    ];
  }

  async send(body) {
    const buttons = [...this.node.querySelectorAll('button')];
    for (const button of buttons) button.disabled = true;
    this.error.replaceChildren();
    this.note.textContent = 'Sending…';
    try {
      await jsonPost('/runs/' + encodeURIComponent(this.runId) + '/input', body, this.signal);
      this.note.textContent = 'Sent: the run goes on.';
      this.node.dataset.sent = 'yes';
      nudge();
    } catch (error) {
      if (this.signal.aborted) return;
      this.note.textContent = '';
      this.error.replaceChildren(errorBox(error));
      for (const button of buttons) button.disabled = false;
    }
  }

  // The run went on (answered here or elsewhere, or it ended).
  hide() {
    this.node.hidden = true;
    this.node.replaceChildren();
    delete this.node.dataset.sent;
    delete this.node.dataset.asked;
  }
}

// What a person says to a running run (steering).
class SteerCard {
  constructor(runId, signal) {
    const text = el('input', { id: 'steer-text', placeholder: 'e.g. also update the README', autocomplete: 'off' });
    this.note = el('div', { id: 'steer-note', class: 'muted' });
    const form = el('form', { id: 'steer-form', class: 'inline-form' }, text,
      el('button', { type: 'submit', id: 'steer-send', text: 'Send' }));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      this.note.replaceChildren('Sending…');
      try {
        await jsonPost('/runs/' + encodeURIComponent(runId) + '/messages', { text: text.value }, signal);
        this.note.replaceChildren('Sent: the model hears it before its next step.');
        text.value = '';
      } catch (error) {
        if (!signal.aborted) this.note.replaceChildren(errorBox(error));
      }
    });
    this.node = el('section', { class: 'card', id: 'steer-card', hidden: true },
      el('h2', { text: 'Say something to the run' }), form, this.note);
  }

  show(visible) {
    this.node.hidden = !visible;
  }
}

// A versioned run's branch and changes, per file and per checkpoint, with apply and discard.
class ProjectCard {
  constructor(runId, signal) {
    this.runId = runId;
    this.signal = signal;
    this.workspace = null;
    this.where = el('div', { id: 'project-where' });
    this.views = el('div', { id: 'diff-views', class: 'diff-views' });
    this.files = el('div', { id: 'diff-files' });
    this.note = el('div', { id: 'project-note', class: 'muted' });
    this.apply = el('button', { type: 'button', id: 'apply', text: 'Apply to the working tree', onclick: () => this.doApply(false) });
    this.applyCommit = el('button', { type: 'button', id: 'apply-commit', text: 'Apply and commit', onclick: () => this.doApply(true) });
    this.discard = el('button', { type: 'button', id: 'discard', class: 'danger', text: 'Discard', onclick: () => this.doDiscard() });
    this.actions = el('div', { class: 'actions', id: 'project-actions', hidden: true }, this.apply, this.applyCommit, this.discard);
    this.node = el('section', { class: 'card', id: 'project-card', hidden: true },
      el('h2', { text: 'Changes' }), this.where, this.views, this.files, this.actions, this.note);
  }

  opened(p) {
    if (this.workspace) return;
    this.workspace = p;
    this.where.replaceChildren(workspaceLine(p));
    this.note.textContent = 'Its changes are shown here when the run has ended.';
    this.node.hidden = false;
  }

  ended() {
    if (!this.workspace) return;
    const canApply = this.workspace.origin === 'project' || this.workspace.origin === 'copy';
    this.apply.hidden = !canApply;
    this.applyCommit.hidden = this.workspace.origin !== 'project';
    this.actions.hidden = false;
    this.note.textContent = '';
    this.load(null);
  }

  // The changes of the whole run (`checkpoint` null) or of one checkpoint.
  async load(checkpoint) {
    if (!this.workspace) return;
    const query = checkpoint ? '?checkpoint=' + encodeURIComponent(checkpoint) : '';
    this.files.replaceChildren(el('p', { class: 'muted', text: 'Loading the diff…' }));
    try {
      const diff = await api('/runs/' + encodeURIComponent(this.runId) + '/diff' + query, { signal: this.signal });
      if (this.signal.aborted) return;
      this.drawViews(diff);
      this.drawFiles(diff);
      this.node.dataset.diff = checkpoint || 'run';
    } catch (error) {
      if (!this.signal.aborted) this.files.replaceChildren(errorBox(error));
    }
  }

  drawViews(diff) {
    const button = (label, checkpoint) => el('button', {
      type: 'button', class: 'view' + ((diff.checkpoint || null) === checkpoint ? ' current' : ''),
      'data-checkpoint': checkpoint || '', text: label, onclick: () => this.load(checkpoint),
    });
    this.views.replaceChildren();
    append(this.views, ['Show: ', button('the whole run', null),
      (diff.checkpoints || []).map((commit, i) => button(`checkpoint ${i + 1} (${shortCommit(commit)})`, commit))]);
  }

  drawFiles(diff) {
    const files = Array.isArray(diff.files) ? diff.files : [];
    const added = files.reduce((n, f) => n + (f.added || 0), 0);
    const removed = files.reduce((n, f) => n + (f.removed || 0), 0);
    const what = diff.checkpoint ? `checkpoint ${shortCommit(diff.checkpoint)} against ${shortCommit(diff.from)}` : `${diff.branch} against its base ${shortCommit(diff.base)}`;
    const head = el('p', { class: 'diff-head' }, `${files.length} file(s) changed, +${added} −${removed}: ${what}`);
    this.files.replaceChildren(head, ...files.map((file) => fileDiff(file, files.length <= 6)));
  }

  async doApply(commit) {
    this.busy(true);
    try {
      const applied = await jsonPost('/runs/' + encodeURIComponent(this.runId) + '/apply', { commit }, this.signal);
      const files = applied.files || [];
      this.note.replaceChildren(files.length === 0
        ? 'The run changed nothing; there was nothing to apply.'
        : applied.commit
          ? `Committed ${files.length} file(s) from ${applied.branch} as ${shortCommit(applied.commit)}.`
          : `Applied ${files.length} file(s) from ${applied.branch} to the working tree, uncommitted: ${files.join(', ')}.`);
      this.node.dataset.applied = applied.commit ? 'commit' : 'tree';
    } catch (error) {
      if (!this.signal.aborted) this.note.replaceChildren(errorBox(error));
    }
    this.busy(false);
  }

  // Asks once more before removing the branch.
  async doDiscard() {
    if (!this.discard.dataset.confirm) {
      this.discard.dataset.confirm = 'yes';
      this.discard.textContent = 'Really discard the worktree and branch?';
      return;
    }
    this.busy(true);
    try {
      await jsonPost('/runs/' + encodeURIComponent(this.runId) + '/discard', {}, this.signal);
      this.note.replaceChildren('Discarded: the worktree and branch are gone; the runlog stays.');
      this.actions.hidden = true;
      this.views.replaceChildren();
      this.files.replaceChildren();
      this.node.dataset.discarded = 'yes';
    } catch (error) {
      if (!this.signal.aborted) this.note.replaceChildren(errorBox(error));
    }
    this.busy(false);
  }

  busy(on) {
    for (const button of this.actions.querySelectorAll('button')) button.disabled = on;
  }
}

// One file of a diff: its path and counts, its lines coloured; hostile text shown as text.
function fileDiff(file, open) {
  const counts = typeof file.added === 'number' ? ` +${file.added} −${file.removed}` : ' binary';
  const lines = String(file.diff || '').replace(/\n$/, '').split('\n');
  const pre = el('pre', { class: 'diff' });
  const draw = (upTo) => {
    pre.replaceChildren(...lines.slice(0, upTo).map((line) => el('span', { class: 'dl ' + diffLineClass(line), text: line })));
  };
  draw(DIFF_LINES_SHOWN);
  const more = lines.length > DIFF_LINES_SHOWN
    ? el('button', { type: 'button', class: 'link more', text: `show all ${number(lines.length)} lines`, onclick: (event) => { draw(lines.length); event.target.remove(); } })
    : '';
  return el('details', { class: 'file-diff', 'data-path': file.path, open: open },
    el('summary', {}, el('code', { class: 'path', text: file.path || '?' }), el('span', { class: 'muted', text: counts })),
    pre, more, file.truncated ? el('div', { class: 'muted', text: 'cut: `fabric diff` on the server shows it whole' }) : '');
}

function diffLineClass(line) {
  if (line.startsWith('+++') || line.startsWith('---') || line.startsWith('diff --git') || line.startsWith('index ')) return 'meta';
  if (line.startsWith('@@')) return 'hunk';
  if (line.startsWith('+')) return 'add';
  if (line.startsWith('-')) return 'del';
  return 'ctx';
}

// The delegated run in an `agent__` call's result or error, when it names one.
function childOf(payload) {
  for (const text of [payload.result, payload.error_message]) {
    if (typeof text !== 'string') continue;
    try {
      const value = JSON.parse(text);
      if (value && typeof value.run_id === 'string') return value;
    } catch (_) {
      const match = /\b(\d{8}-\d{6}-\d{3}-[0-9a-f]{8})\b/.exec(text);
      if (match) return { run_id: match[1] };
    }
  }
  return null;
}

async function showRun(runId, signal) {
  const header = new RunHeader(runId, signal);
  const files = el('ul', { id: 'files' });
  const filesCard = el('section', { class: 'card', id: 'files-card', hidden: true }, el('h2', { text: 'Files written' }), files);
  const result = el('section', { class: 'card', id: 'result', hidden: true });
  const follow = el('input', { type: 'checkbox', id: 'follow', checked: true });
  const timelineHead = el('div', { class: 'title' }, el('h2', { text: 'Events' }), el('span', { class: 'spacer' }),
    el('label', { class: 'muted' }, follow, ' follow the newest'));
  const attend = new AttendCard(runId, signal);
  const steer = new SteerCard(runId, signal);
  const project = new ProjectCard(runId, signal);
  header.onStatus = (status) => steer.show(status === 'running');
  showPage('run', header.node, attend.node, steer.node, result, project.node, filesCard,
    el('section', { class: 'card' }, timelineHead, el('div', { id: 'timeline' })));
  document.body.dataset.runState = 'loading';

  const seen = new Set();
  let steps = 0;
  let tokens = 0;
  let startedAt = null;
  const timeline = new Timeline(runId, signal, {
    onEvent(event) {
      const p = event.payload || {};
      if (startedAt === null) startedAt = event.ts;
      if (event.kind === 'run_start') {
        header.set('model', [p.model, p.model_key && `(${p.model_key})`].filter(Boolean).join(' '));
        header.prompt.replaceChildren(longText(p.prompt || '', 'text prompt'));
        if (p.parent_run_id) header.parent.replaceChildren('Delegated by ', runLink(p.parent_run_id));
        if (p.continues && p.continues.run_id) header.parent.replaceChildren(continuesLine(p.continues));
        header.set('started', when(event.ts));
      } else if (event.kind === 'recruitment') {
        header.set('specialists', (p.specialist_ids || []).join(', '));
      } else if (event.kind === 'workspace') {
        project.opened(p);
      } else if (event.kind === 'input_required') {
        header.setStatus('input_required');
        attend.show(event);
      } else if (event.kind === 'input_answered' || event.kind === 'run_resumed') {
        attend.hide();
        if (header.current === 'input_required') header.setStatus('running');
      } else if (event.kind === 'llm_response' && p.purpose !== 'routing') {
        steps += 1;
        if (p.usage && typeof p.usage.total_tokens === 'number') tokens += p.usage.total_tokens;
      } else if (event.kind === 'run_complete' || event.kind === 'run_failed') {
        header.setStatus(p.status || (event.kind === 'run_complete' ? 'completed' : 'failed'));
        header.live.hidden = true;
        if (typeof p.steps === 'number') steps = p.steps;
        if (p.usage && typeof p.usage.total_tokens === 'number') tokens = p.usage.total_tokens;
        header.set('took', duration(event.ts - startedAt));
        attend.hide();
        showResult(result, event);
        project.ended();
        performance.mark('fabric:run-rendered');
        document.body.dataset.drawn = 'end';
      }
    },
    onCheckpoint(commit) {
      project.load(commit);
      project.node.scrollIntoView();
    },
    onWrite(call) {
      const path = call.payload.args && call.payload.args.path;
      if (typeof path !== 'string' || seen.has(path)) return;
      seen.add(path);
      const content = call.payload.args.content;
      files.append(el('li', {}, el('code', { text: path }),
        typeof content === 'string' ? el('span', { class: 'muted', text: ` ${number(content.length)} characters` }) : ''));
      filesCard.hidden = false;
    },
    onFlush(line) {
      header.set('steps', number(steps));
      header.set('tokens', number(tokens));
      header.set('events', number(line.count));
      document.body.dataset.events = String(line.count);
      if (follow.checked && document.body.dataset.runState === 'running') {
        window.scrollTo(0, document.documentElement.scrollHeight);
      }
    },
    onState(state) {
      document.body.dataset.follow = state;
      header.live.hidden = state !== 'live';
      if (state === 'not-live' || state === 'error') {
        header.cancel.hidden = true;
        steer.show(false);
      }
    },
  });
  document.getElementById('timeline').append(timeline.node);

  try {
    const run = await api('/runs/' + encodeURIComponent(runId), { signal });
    if (signal.aborted) return;
    header.setStatus(run.status);
    header.set('specialists', (run.specialist_ids || []).join(', '));
    if (run.prompt) header.prompt.replaceChildren(longText(run.prompt, 'text prompt'));
    // A finished run is read from its start; following the newest is for live runs.
    follow.checked = run.status === 'running' || run.status === 'input_required';
    timeline.start();
  } catch (error) {
    if (signal.aborted) return;
    document.body.dataset.runState = 'error';
    header.node.after(errorBox(error));
  }
}

function showResult(card, event) {
  const p = event.payload || {};
  const parts = [el('h2', { text: event.kind === 'run_complete' ? 'Result' : 'How it ended' })];
  if (p.reason) parts.push(el('p', { class: event.kind === 'run_failed' ? 'error' : 'muted', text: p.reason }));
  const payload = p.result;
  if (payload && typeof payload === 'object') {
    if (typeof payload.summary === 'string') parts.push(el('p', { class: 'summary-text', text: payload.summary }));
    if (Array.isArray(payload.artifacts) && payload.artifacts.length) {
      parts.push(el('h3', { text: 'Artifacts' }), el('ul', {}, payload.artifacts.map((a) => el('li', {}, el('code', { text: typeof a === 'string' ? a : json(a) })))));
    }
    if (Array.isArray(payload.sections)) {
      parts.push(el('h3', { text: 'Members' }), el('ul', {}, payload.sections.map((s) => el('li', {}, el('b', { text: s.specialist_id || '?' }), ' ', statusBadge(s.status),
        s.result && typeof s.result.summary === 'string' ? ' ' + s.result.summary : (s.reason ? ' ' + s.reason : '')))));
    }
    const details = el('details', {}, el('summary', { text: 'the whole payload' }), longText(json(payload), 'text'));
    parts.push(details);
  }
  card.replaceChildren(...parts);
  card.hidden = false;
}

// ---------------------------------------------------------------------------------------

function start() {
  document.getElementById('forget-token').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showTokenState();
    route();
  });
  // The token is asked for; Escape must not leave the request waiting forever.
  document.getElementById('token-dialog').addEventListener('cancel', (event) => event.preventDefault());
  showTokenState();
  fetch('/health', { cache: 'no-store' })
    .then((r) => r.json())
    .then((h) => { document.getElementById('server').textContent = `fabric ${h.version}`; })
    .catch(() => {});
  window.addEventListener('hashchange', route);
  route();
}

start();
