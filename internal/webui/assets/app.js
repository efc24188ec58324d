// agentd's web UI: a client of the conversation API (/api/v2) and its
// event stream, nothing else. Every text that comes from a model, a tool
// or a person is put on the page with textContent (directly or through
// md.js), never as markup.
import { render, el } from './md.js';
import { changesView } from './changes.js';
import { attachSlash } from './slash.js';

const $ = (id) => document.getElementById(id);
const API = '/api/v2';
const convPath = (id) => `${API}/conversations/${encodeURIComponent(id)}`;

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// ---- the API ----

async function api(method, path, body) {
  const init = { method, headers: {}, credentials: 'same-origin' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, 'The server cannot be reached: ' + e.message);
  }
  let data = null;
  const text = await res.text();
  if (text) { try { data = JSON.parse(text); } catch { data = { error: text }; } }
  if (!res.ok) {
    const msg = (data && data.error) || `${res.status} ${res.statusText}`;
    if (res.status === 401) showLogin();
    throw new APIError(res.status, msg);
  }
  return data;
}

// ---- page state ----

const ui = {
  convId: null,
  open: 0,            // counts conversation opens; events of an older one are dropped
  es: null,
  lastSeq: 0,
  lastId: '',
  retryTimer: 0,
  retryDelay: 500,
  connected: false,
  generating: false,
  count: 0,           // messages in the log
  name: '',
  cards: new Map(),   // call_id → tool card
  toolCall: new Map(),// tool_id → call_id
  pending: new Map(), // tool_id → approval element
  elicits: new Map(), // elicit_id → question element
  stream: null,       // the assistant message being streamed
  sentAt: 0,          // when Send was pressed (for the first-token time)
  lastError: '',
  // replay, when the page opens a conversation mid-run, fetches the
  // events before the log's seq again for the text streamed so far:
  // {upTo: the log's seq, back: how far back to try, shortest last}.
  replay: null,
  mayReplay: false,   // the first snapshot after a load may ask for a replay
  retryUntil: 0,      // when a retried model request is sent again (ms since the epoch)
  retryText: '',
  compacting: false,
  tokens: 0,          // tokens and cost of the assistant messages seen
  cost: 0,
  opening: false,     // a conversation is being read (route waits for it)
  model: '',          // the open conversation's model (provider/id)
  thinking: '',       // and its thinking level
  welcomeModel: '',   // the model a message typed on the welcome starts with
  failed: new Map(),  // tool_id → ms, the calls of the last batch that failed
};

// The turns' changes and their reverts (changes.js).
const changes = changesView({
  api, convPath, note: (t) => note(t), banner: (t) => banner(t), state: () => ui,
  fillPrompt: (t) => { if (!$('prompt').value.trim()) $('prompt').value = t; },
});

// ---- login ----

function showLogin() {
  $('app').hidden = true;
  $('login').hidden = false;
  closeStream();
  $('login-token').focus();
}

$('login-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const tok = $('login-token').value.trim();
  $('login-error').textContent = '';
  try {
    // The cookie is HttpOnly: the token is not kept where a script could
    // read it, and the event stream (EventSource sends no headers) is
    // authenticated by it.
    const res = await fetch(`${API}/auth/cookie`, { method: 'POST', credentials: 'same-origin', headers: { Authorization: 'Bearer ' + tok } });
    if (!res.ok) {
      const d = await res.json().catch(() => ({}));
      $('login-error').textContent = res.status === 401 ? 'That token is not accepted by this server.' : (d.error || res.statusText);
      return;
    }
    $('login-token').value = '';
    $('login').hidden = true;
    boot();
  } catch (err) {
    $('login-error').textContent = 'The server cannot be reached: ' + err.message;
  }
});

$('logout').addEventListener('click', async () => {
  await fetch(`${API}/auth/cookie`, { method: 'DELETE', credentials: 'same-origin' }).catch(() => {});
  showLogin();
});

// ---- conversation list ----

let listTimer = 0;
let searchTimer = 0;

async function refreshList() {
  clearTimeout(listTimer);
  try {
    const q = $('search').value.trim();
    const [list, sessions] = await Promise.all([
      api('GET', `${API}/conversations?limit=100&q=${encodeURIComponent(q)}`),
      api('GET', `${API}/sessions`).catch(() => []),
    ]);
    // A run started on any face marks its conversation; the attachments
    // cover servers whose list predates the field.
    const working = new Set(sessions.filter((s) => s.generating).map((s) => s.conversation_id));
    for (const c of list) if (c.generating) working.add(c.id);
    const ul = $('conv-list');
    ul.replaceChildren();
    for (const c of list) {
      const li = el('li');
      const b = el('button', 'conv-item' + (c.id === ui.convId ? ' active' : ''));
      b.type = 'button';
      b.dataset.id = c.id;
      const top = el('span', 'conv-name', c.name || c.id);
      // The open conversation's own stream knows best.
      if (c.id === ui.convId ? ui.generating : working.has(c.id)) {
        const dot = el('span', 'working', 'working');
        dot.title = 'The agent is working';
        top.append(' ', dot);
      }
      b.append(top);
      if (c.last_message_preview) b.append(el('span', 'conv-preview', c.last_message_preview));
      b.append(el('span', 'conv-time', ago(c.last_updated || c.modified)));
      b.addEventListener('click', () => { location.hash = '#/c/' + encodeURIComponent(c.id); closeSidebar(); });
      li.append(b);
      ul.append(li);
    }
    if (!list.length) ul.append(el('li', 'note', q ? 'No conversation matches.' : 'No conversations yet.'));
  } catch (e) {
    if (e.status === 401) return;
  }
  listTimer = setTimeout(refreshList, 5000);
}

function ago(sec) {
  if (!sec) return '';
  const d = Math.max(0, Date.now() / 1000 - sec);
  if (d < 60) return 'just now';
  if (d < 3600) return Math.floor(d / 60) + ' min ago';
  if (d < 86400) return Math.floor(d / 3600) + ' h ago';
  return new Date(sec * 1000).toLocaleDateString();
}

$('search').addEventListener('input', () => { clearTimeout(searchTimer); searchTimer = setTimeout(refreshList, 200); });
$('menu').addEventListener('click', () => document.body.classList.toggle('sidebar-open'));
function closeSidebar() { document.body.classList.remove('sidebar-open'); }

// ---- new conversation ----

// models reads the server's models, those that cannot be used now too
// (each with why), once a page load unless asked again.
let modelsRead = null;
function models(again) {
  if (!modelsRead || again) {
    modelsRead = api('GET', `${API}/models?all=true`);
    modelsRead.catch(() => { modelsRead = null; });
  }
  return modelsRead;
}

const usable = (info) => info.available !== false;

// fillModels lists the models in a select, the unusable ones greyed out
// with their reason, and selects want (or the default); it says in note
// what a person should know, and returns how many can be used.
async function fillModels(sel, note, want) {
  sel.replaceChildren();
  note.textContent = '';
  let m;
  try {
    m = await models(true);
  } catch (e) {
    note.textContent = 'The models could not be listed: ' + e.message;
    return 0;
  }
  let n = 0;
  const pick = want || m.default;
  for (const info of m.models) {
    const o = el('option', '', `${info.name || info.model} (${info.id})`);
    o.value = info.id;
    if (!usable(info)) {
      // Shown, so a person sees what a key would unlock, and why not.
      o.disabled = true;
      o.textContent += ' — not usable: ' + (info.unavailable_reason || 'unavailable');
    } else {
      n++;
    }
    if (info.id === m.default) o.textContent += ' — default';
    if (info.supports_reasoning) o.textContent += ' — thinks';
    if (info.deprecated) o.textContent += ' — deprecated';
    if (info.id === pick) o.selected = true;
    sel.append(o);
  }
  if (want && ![...sel.options].some((o) => o.value === want)) {
    // The conversation's model is no longer listed (its provider went
    // away): shown as it is, so nothing changes without a choice.
    const o = el('option', '', `${want} — not listed by this server`);
    o.value = want;
    o.selected = true;
    sel.prepend(o);
  }
  note.textContent = n
    ? 'Models greyed out cannot be used now; each says why (usually a missing provider key).'
    : 'No model can be used: configure a provider key for agentd (see agentd models).';
  return n;
}

async function openNewForm() {
  closeSidebar();
  $('settings-wrap').hidden = true;
  $('new-form-wrap').hidden = false;
  $('welcome').hidden = true;
  $('new-error').textContent = '';
  $('new-name').focus();
  await fillModels($('new-model'), $('new-model-note'));
}

$('new-conv').addEventListener('click', openNewForm);
$('welcome-start').addEventListener('click', openNewForm);
$('new-cancel').addEventListener('click', () => {
  $('new-form-wrap').hidden = true;
  if (!ui.convId) showWelcome();
});

$('new-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const id = newID();
  const chat = { name: $('new-name').value.trim(), model: $('new-model').value };
  if ($('new-cwd').value.trim()) chat.workspace = $('new-cwd').value.trim();
  if ($('new-thinking').value) chat.thinking = $('new-thinking').value;
  try {
    await api('PUT', convPath(id), { config: { chat } });
    $('new-form-wrap').hidden = true;
    $('new-form').reset();
    location.hash = '#/c/' + encodeURIComponent(id);
    refreshList();
  } catch (err) {
    $('new-error').textContent = err.message;
  }
});

function newID() {
  const d = new Date();
  const p = (n) => String(n).padStart(2, '0');
  const r = crypto.getRandomValues(new Uint8Array(3));
  return `web-${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}-` +
    Array.from(r, (b) => b.toString(16).padStart(2, '0')).join('');
}

// ---- model and thinking of the open conversation ----

function showModel() {
  const b = $('conv-model');
  b.hidden = !ui.convId || !ui.model;
  b.textContent = `${ui.model} · thinking ${ui.thinking || 'off'}`;
  showMode();
}

// ---- the mode of the open conversation (build, plan, configured) ----

function showMode() {
  const s = $('conv-mode');
  const modes = ui.modes || [];
  s.hidden = !ui.convId || !modes.length;
  if (s.hidden) return;
  const names = modes.map((m) => m.name);
  if (Array.from(s.options, (o) => o.value).join() !== names.join()) {
    s.replaceChildren(...modes.map((m) => {
      const o = document.createElement('option');
      o.value = m.name;
      o.textContent = 'mode: ' + m.name;
      if (m.description) o.title = m.description;
      return o;
    }));
  }
  s.value = ui.mode || 'build';
  const cur = modes.find((m) => m.name === s.value);
  s.classList.toggle('mode-ro', !!(cur && cur.read_only));
}

$('conv-mode').addEventListener('change', async () => {
  const s = $('conv-mode');
  const mode = s.value;
  const id = ui.convId;
  try {
    const r = await api('PATCH', convPath(id) + '/config', { chat: { mode } });
    if (id !== ui.convId) return;
    ui.mode = (r && r.config && r.config.chat && r.config.chat.mode) || mode;
    const cur = (ui.modes || []).find((m) => m.name === ui.mode);
    note(`From now on: ${ui.mode} mode.` + (cur && cur.read_only ? ' The agent reads and proposes a plan; it changes nothing.' : ''));
  } catch (err) {
    // The server's words: a run in progress, a mode it does not know.
    banner(err.message);
  }
  showMode();
});

$('conv-model').addEventListener('click', async () => {
  const wrap = $('settings-wrap');
  if (!wrap.hidden) { wrap.hidden = true; return; }
  $('new-form-wrap').hidden = true;
  $('set-error').textContent = '';
  $('set-thinking').value = ui.thinking || 'off';
  wrap.hidden = false;
  await fillModels($('set-model'), $('set-model-note'), ui.model);
  $('set-model').focus();
});
$('set-cancel').addEventListener('click', () => { $('settings-wrap').hidden = true; $('prompt').focus(); });

$('settings-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const chat = {};
  const model = $('set-model').value;
  const thinking = $('set-thinking').value;
  if (model && model !== ui.model) chat.model = model;
  if (thinking !== (ui.thinking || 'off')) chat.thinking = thinking;
  if (!Object.keys(chat).length) { $('settings-wrap').hidden = true; return; }
  $('set-error').textContent = '';
  const id = ui.convId;
  let r;
  try {
    r = await api('PATCH', convPath(id) + '/config', { chat });
  } catch (err) {
    // The server's own words: a run in progress, a model it does not
    // know, a level it does not take.
    $('set-error').textContent = err.message;
    return;
  }
  if (id !== ui.convId) return;
  const got = (r && r.config && r.config.chat) || {};
  ui.model = got.model || ui.model;
  ui.thinking = got.thinking || 'off';
  showModel();
  $('settings-wrap').hidden = true;
  let text = `From now on: ${ui.model}, thinking ${ui.thinking}.`;
  if (chat.thinking && chat.thinking !== ui.thinking) {
    // The model cannot think at the level asked for: say so, rather than
    // show a level that is not used.
    text += ` ${ui.model} does not think at level ${chat.thinking}, so the level is ${ui.thinking}.`;
  }
  note(text);
  $('prompt').focus();
});

// ---- rename, fork, delete ----

$('rename').addEventListener('click', () => {
  const title = $('conv-title');
  const input = el('input', 'rename-input');
  input.value = ui.name || ui.convId;
  input.setAttribute('aria-label', 'Conversation name');
  title.replaceChildren(input);
  input.focus();
  input.select();
  const done = async (save) => {
    input.onblur = null;
    if (save && input.value.trim()) {
      try {
        await api('PATCH', convPath(ui.convId) + '/config', { chat: { name: input.value.trim() } });
        ui.name = input.value.trim();
        refreshList();
      } catch (e) { banner(e.message); }
    }
    title.textContent = ui.name || ui.convId;
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); done(true); }
    if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); done(false); }
  });
  input.onblur = () => done(true);
});

$('fork').addEventListener('click', async () => {
  if (!ui.count) { banner('There is nothing to fork yet.'); return; }
  try {
    const r = await api('POST', convPath(ui.convId) + '/fork?after_message=' + (ui.count - 1));
    location.hash = '#/c/' + encodeURIComponent(r.conversation_id);
    refreshList();
  } catch (e) { banner(e.message); }
});

let deleteArmed = 0;
$('delete').addEventListener('click', async () => {
  const b = $('delete');
  if (!deleteArmed) {
    b.textContent = 'Really delete?';
    deleteArmed = setTimeout(() => { deleteArmed = 0; b.textContent = 'Delete'; }, 4000);
    return;
  }
  clearTimeout(deleteArmed);
  deleteArmed = 0;
  b.textContent = 'Delete';
  try {
    await api('DELETE', convPath(ui.convId));
    location.hash = '';
    refreshList();
  } catch (e) { banner(e.message); }
});

// ---- the conversation ----

function banner(text) {
  const b = $('banner');
  b.textContent = text;
  b.hidden = !text;
}

function closeStream() {
  clearTimeout(ui.retryTimer);
  if (ui.es) { ui.es.close(); ui.es = null; }
  ui.connected = false;
  ui.sessionId = undefined;
}

function resetView() {
  ui.cards.clear();
  ui.toolCall.clear();
  ui.failed.clear();
  ui.pending.clear();
  ui.elicits.clear();
  ui.stream = null;
  ui.count = 0;
  ui.tokens = 0;
  ui.cost = 0;
  ui.retryUntil = 0;
  ui.compacting = false;
  $('messages').replaceChildren();
  $('pending').replaceChildren();
  $('plan').hidden = true;
  $('undo-bar').hidden = true;
}

async function openConversation(id) {
  closeStream();
  const my = ++ui.open;
  ui.convId = id;
  ui.generating = false;
  ui.lastError = '';
  banner('');
  resetView();
  $('new-form-wrap').hidden = true;
  $('settings-wrap').hidden = true;
  ui.model = '';
  ui.thinking = '';
  showModel();
  for (const b of ['rename', 'fork', 'delete', 'prompt', 'send', 'attach-btn']) $(b).disabled = !id;
  $('conv-actions').hidden = !id;
  $('state').hidden = !id;
  if (!id) {
    $('conv-title').textContent = 'Welcome';
    setState();
    showWelcome();
    return;
  }
  hideWelcome();
  $('conv-title').textContent = id;
  ui.opening = true;
  try {
    await load(my);
  } finally {
    if (my === ui.open) ui.opening = false;
  }
  document.querySelectorAll('.conv-item').forEach((b) => b.classList.toggle('active', b.dataset.id === id));
  if (my === ui.open && !ui.pending.size) $('prompt').focus();
}

// ---- the welcome ----

// examples are things to try; each fills the message box.
const examples = [
  { title: 'Tour this project', prompt: 'Give me a short tour of the project in this directory: what it does, how it is laid out, and where to start reading.' },
  { title: 'Find the loose ends', prompt: 'Find the TODO and FIXME comments here and make a plan to deal with them, most important first.' },
  { title: 'Run the tests', prompt: 'Find out how this project runs its tests, run them, and tell me what failed and why.' },
  { title: 'Write a script', prompt: 'Write a shell script, count-lines.sh, that counts the lines of each kind of file here, then run it.' },
];

function hideWelcome() {
  $('welcome').hidden = true;
  $('messages').hidden = false;
  $('prompt').placeholder = promptHint;
}

const promptHint = 'Message (Enter sends, Shift+Enter new line, Esc interrupts)';

// showWelcome is the page with no conversation open: how to start, what
// to try, and which models work.
async function showWelcome() {
  const my = ui.open;
  $('welcome').hidden = false;
  $('messages').hidden = true;
  const ex = $('welcome-examples');
  if (!ex.childElementCount) {
    for (const x of examples) {
      const b = el('button', 'example');
      b.type = 'button';
      b.append(el('strong', '', x.title), el('span', '', x.prompt));
      b.addEventListener('click', () => {
        const ta = $('prompt');
        ta.value = x.prompt;
        ta.focus();
        ta.setSelectionRange(ta.value.length, ta.value.length);
      });
      ex.append(b);
    }
  }
  let m;
  try {
    m = await models(true);
  } catch (e) {
    if (my !== ui.open) return;
    $('welcome-models-note').textContent = 'The models could not be listed: ' + e.message;
    welcomeModel('');
    return;
  }
  if (my !== ui.open) return;
  const ok = m.models.filter(usable);
  const def = m.models.find((i) => i.id === m.default);
  const list = $('welcome-models');
  list.replaceChildren();
  for (const info of ok) {
    const li = el('li', 'model usable');
    li.dataset.id = info.id;
    li.append(el('span', 'mark', '✓ '), el('strong', '', info.name || info.model), ' ', el('code', '', info.id));
    if (info.id === m.default) li.append(' ', el('span', 'badge', 'default'));
    if (info.supports_reasoning) li.append(' ', el('span', 'badge', 'thinks'));
    list.append(li);
  }
  // The models that need something first, by provider: the reason
  // names the key to set.
  const bad = m.models.filter((i) => !usable(i));
  const det = $('welcome-unusable');
  det.hidden = !bad.length;
  const byProvider = new Map();
  for (const i of bad) {
    const k = i.provider || i.id.split('/')[0];
    if (!byProvider.has(k)) byProvider.set(k, { n: 0, reasons: new Set() });
    const g = byProvider.get(k);
    g.n++;
    g.reasons.add(i.unavailable_reason || 'unavailable');
  }
  const ul = det.querySelector('ul');
  ul.replaceChildren();
  for (const [p, g] of byProvider) {
    const li = el('li', 'model unusable');
    li.dataset.provider = p;
    li.append(el('strong', '', p), ` (${g.n} model${g.n === 1 ? '' : 's'}): ${[...g.reasons].join('; ')}`);
    ul.append(li);
  }
  det.querySelector('summary').textContent = `${bad.length} more model${bad.length === 1 ? '' : 's'} cannot be used now, and why`;
  det.open = !ok.length;
  let note;
  if (!ok.length) note = 'No model can be used yet: set a provider key (below, each provider names its variable) and restart agentd. `agentd models` lists them too.';
  else if (def && usable(def)) note = `A message typed below starts a conversation with ${def.name || def.id}, the default. Start a conversation to choose another model.`;
  else if (def) note = `The default model ${def.id} cannot be used (${def.unavailable_reason || 'unavailable'}): start a conversation and choose one of these.`;
  else note = 'There is no default model: start a conversation and choose one of these.';
  if (ok.length && ok.every((i) => i.provider === 'faux')) {
    // Say it: a person who set no key would otherwise take the echo for
    // a model that does not listen.
    note += ' Faux models answer without any LLM (they echo what you write): to work with a real model, set a provider key named below and restart agentd.';
  }
  $('welcome-models-note').textContent = note;
  welcomeModel(def && usable(def) ? def.id : '');
}

// welcomeModel sets the model a message typed on the welcome uses; none
// disables the message box there.
function welcomeModel(id) {
  ui.welcomeModel = id;
  if (ui.convId) return;
  $('prompt').disabled = !id;
  $('send').disabled = !id;
  $('attach-btn').disabled = !id;
  $('prompt').placeholder = id ? `Message a new conversation with ${id} (Enter sends)` : 'No model can be used yet';
  for (const b of $('welcome-examples').querySelectorAll('button')) b.disabled = !id;
}

// startWith creates a conversation on the default model for a message
// typed on the welcome, and opens it.
async function startWith(text) {
  const id = newID();
  const name = text.split('\n')[0].trim().slice(0, 48);
  await api('PUT', convPath(id), { config: { chat: { name, model: ui.welcomeModel } } });
  location.hash = '#/c/' + encodeURIComponent(id);
  await openConversation(id);
  refreshList();
}

// load reads the conversation and follows its events from the seq the
// read covers: nothing is missed and nothing comes twice.
async function load(my) {
  let conv;
  const config = api('GET', convPath(ui.convId) + '/config').catch(() => null);
  try {
    conv = await api('GET', convPath(ui.convId));
  } catch (e) {
    if (my !== ui.open) return;
    if (e.status !== 401) banner(e.status === 404 ? 'This conversation does not exist (any more).' : e.message);
    if (e.status === 0) scheduleReconnect(my);
    return;
  }
  const cfg = await config;
  if (my !== ui.open) return;
  showContextFiles(cfg && cfg.context_files);
  loadCommands(my);
  if (cfg && cfg.chat) {
    ui.model = cfg.chat.model || '';
    ui.thinking = cfg.chat.thinking || 'off';
    ui.mode = cfg.chat.mode || 'build';
    ui.modes = cfg.modes || [];
  }
  showModel();
  resetView();
  ui.name = conv.name;
  $('conv-title').textContent = conv.name || conv.id;
  conv.log.forEach((m) => addMessage(m));
  ui.generating = !!(conv.session && conv.session.generating);
  ui.lastSeq = conv.seq || 0;
  ui.replay = null;
  ui.mayReplay = true;
  connect(my);
  setState();
  scrollDown(true);
  changes.refresh(my);
}

function connect(my) {
  closeStream();
  // The last frame's own id ("7.1" inside an event of several frames)
  // when it is where the page stands, so no frame is lost or repeated.
  let after = ui.lastId && Number(ui.lastId) === ui.lastSeq ? ui.lastId : Math.floor(ui.lastSeq);
  if (ui.replay) after = Math.max(0, Math.floor(ui.replay.upTo) - ui.replay.back[0]);
  const url = convPath(ui.convId) + '/events?after=' + after;
  const es = new EventSource(url);
  ui.es = es;
  es.onmessage = (e) => {
    if (my !== ui.open || es !== ui.es) return;
    let ev;
    try { ev = JSON.parse(e.data); } catch { return; }
    const n = e.lastEventId ? Number(e.lastEventId) : NaN;
    if (Number.isFinite(n) && n > ui.lastSeq) { ui.lastSeq = n; ui.lastId = e.lastEventId; }
    ui.retryDelay = 500;
    if (ui.replay && n <= ui.replay.upTo && ev.type !== 'connected' && ev.type !== 'resync') {
      replayed(ev);
      return;
    }
    handle(ev, my);
  };
  es.onerror = () => {
    if (my !== ui.open || es !== ui.es) return;
    // The browser would reconnect with the URL's ?after=, which is older
    // than what was received: reconnect here, from the last seq.
    es.close();
    ui.es = null;
    ui.connected = false;
    if (ui.replay && ui.lastSeq <= ui.replay.upTo) {
      // Cut off inside the replay (no event after it yet): the message
      // it was rebuilding may be one the log already shows, or the one
      // being written with only part of its text. It goes, and the
      // reconnect replays again from as far back, as a page that kept
      // up shows the text streamed so far.
      endStream();
    } else {
      ui.replay = null;
    }
    setState();
    scheduleReconnect(my);
  };
}

function scheduleReconnect(my) {
  clearTimeout(ui.retryTimer);
  ui.retryTimer = setTimeout(async () => {
    if (my !== ui.open) return;
    try {
      await api('GET', convPath(ui.convId) + '?limit=1');
    } catch (e) {
      if (e.status === 401) return;
      if (e.status === 404) { banner('This conversation was deleted.'); return; }
      ui.retryDelay = Math.min(ui.retryDelay * 2, 5000);
      scheduleReconnect(my);
      return;
    }
    connect(my);
  }, ui.retryDelay);
}

function handle(ev, my) {
  switch (ev.type) {
    case 'connected':
      if (ev.generating && ui.mayReplay) {
        // A message is being written: its text so far is in no log.
        // Follow again from further back, rebuilding that text from the
        // events up to what this page has already seen.
        ui.mayReplay = false;
        ui.replay = { upTo: ui.lastSeq, back: [2048, 256, 32] };
        connect(my);
        return;
      }
      ui.mayReplay = false;
      ui.connected = true;
      // The stream's attachment: step and interrupt name it, as the
      // API asks of its clients.
      ui.sessionId = ev.session_id;
      ui.generating = ev.generating;
      for (const t of ev.pending_tools || []) addApproval(t);
      for (const q of ev.pending_elicitations || []) addElicit(q);
      markRunning(ev.generating);
      // The output so far of calls still running: the log the page was
      // built from keeps none of it.
      for (const o of ev.tool_outputs || []) if (!hasResult(o.tool_id)) toolOutput(o);
      if (ev.last_error && !ui.generating) showError(ev.last_error);
      break;
    case 'resync':
      if (ui.replay) {
        // The log does not reach that far back: try a shorter way, and
        // in the end go without the text streamed before the page opened.
        ui.replay.back.shift();
        if (!ui.replay.back.length) ui.replay = null;
        endStream();
        connect(my);
        return;
      }
      ui.lastSeq = ev.seq;
      load(my);
      return;
    case 'ping':
      break;
    case 'generation_started':
      ui.generating = true;
      startStream();
      refreshListSoon();
      break;
    case 'generation_progress':
      if (!ui.stream) startStream();
      appendStream(ev.token);
      break;
    case 'message_added': {
      // The calls a Stop ended are those since the last message the
      // model finished (the one it was cut off in does not count).
      if (ev.message.role === 'assistant' && !(ev.message.metadata || {}).interrupted) ui.failed.clear();
      const ms = ev.message.role === 'assistant' ? endStream() : undefined;
      const d = addMessage(ev.message);
      if (d && ms !== undefined) {
        d.dataset.firstTokenMs = String(ms);
        d.title = `first token ${ms} ms after Send`;
      }
      break;
    }
    case 'generation_complete':
      break;
    case 'tool_pending':
      addApproval(ev);
      break;
    case 'tool_executing':
      settleApproval(ev.tool_id);
      toolStatus(ev.tool_id, 'running', 'running…');
      break;
    case 'tool_output':
      toolOutput(ev);
      break;
    case 'tool_complete':
      settleApproval(ev.tool_id);
      toolComplete(ev);
      break;
    case 'elicit_pending':
      addElicit(ev);
      break;
    case 'interrupted':
      endStream();
      clearPending();
      stopped();
      note('Interrupted.');
      break;
    case 'run_ended':
      ui.generating = false;
      ui.retryUntil = 0;
      ui.compacting = false;
      endStream();
      clearPending();
      refreshListSoon();
      changes.refresh(my);
      break;
    case 'error':
      showError(ev.error);
      break;
    case 'retry_started':
      ui.retryUntil = Date.now() + (ev.delay_ms || 0);
      ui.retryText = `retrying (${ev.attempt}/${ev.max_attempts})`;
      tickRetry();
      break;
    case 'retry_ended':
      ui.retryUntil = 0;
      if (!ev.success && ev.error) showError(ev.error);
      break;
    case 'compaction_started':
      ui.compacting = true;
      break;
    case 'compaction_ended':
      ui.compacting = false;
      if (!ev.error && !ev.aborted) note('Older messages were summarized to make room.');
      break;
    case 'todo_updated':
      showPlan(ev.items.map((i) => ({ text: i.content, status: i.status })));
      break;
    case 'config_changed':
      if (ev.config && ev.config.chat) {
        const f = ev.changed_fields || [];
        if (f.includes('model') && ev.config.chat.model) ui.model = ev.config.chat.model;
        if (f.includes('thinking')) ui.thinking = ev.config.chat.thinking || 'off';
        if (f.includes('mode')) ui.mode = ev.config.chat.mode || 'build';
        showModel();
      }
      if (ev.config && ev.config.chat && ev.config.chat.name) {
        ui.name = ev.config.chat.name;
        if (!$('conv-title').querySelector('input')) $('conv-title').textContent = ui.name;
        refreshListSoon();
      }
      break;
    case 'conversation_edited':
      resetView();
      ev.log.forEach((m) => addMessage(m));
      changes.refresh(my);
      break;
  }
  setState();
}

// replayed takes an event the conversation's log already covers: only
// the text of a message still being written is not in the log, and the
// state of its tool calls (running, their output so far, how long they
// took).
function replayed(ev) {
  switch (ev.type) {
    case 'tool_executing':
      if (!hasResult(ev.tool_id)) toolStatus(ev.tool_id, 'running', 'running…');
      break;
    case 'tool_output':
      if (!hasResult(ev.tool_id)) toolOutput(ev);
      break;
    case 'tool_complete':
      toolComplete(ev);
      break;
    case 'generation_started':
      endStream();
      startStream();
      break;
    case 'generation_progress':
      if (!ui.stream) startStream();
      appendStream(ev.token);
      break;
    case 'message_added':
    case 'run_ended':
    case 'interrupted':
      endStream();
      break;
  }
}

let listSoon = 0;
function refreshListSoon() { clearTimeout(listSoon); listSoon = setTimeout(refreshList, 300); }

function setState() {
  const s = $('state');
  let name = 'idle';
  let text = 'idle';
  if (!ui.convId) { name = 'idle'; text = 'idle'; }
  else if (!ui.connected) { name = 'offline'; text = 'reconnecting…'; }
  else if (ui.pending.size || ui.elicits.size) { name = 'waiting'; text = 'waiting for you'; }
  else if (ui.retryUntil) {
    name = 'retrying';
    text = `${ui.retryText} in ${Math.max(0, Math.ceil((ui.retryUntil - Date.now()) / 1000))} s`;
  } else if (ui.compacting) { name = 'compacting'; text = 'compacting'; }
  else if (ui.generating) { name = 'running'; text = 'running'; }
  s.className = 'state state-' + name;
  s.textContent = text;
  const busy = ui.generating || ui.pending.size > 0 || ui.elicits.size > 0;
  $('interrupt').hidden = !busy;
  const t = $('totals');
  let totals = '';
  if (ui.convId) {
    totals = `${ui.count} message${ui.count === 1 ? '' : 's'}`;
    if (ui.tokens) totals += ` · ${ui.tokens.toLocaleString('en')} tokens · $${ui.cost.toFixed(ui.cost < 1 ? 4 : 2)}`;
  }
  t.textContent = totals;
}

// tickRetry keeps the retry countdown current.
let retryTimer = 0;
function tickRetry() {
  clearTimeout(retryTimer);
  setState();
  if (ui.retryUntil && ui.retryUntil > Date.now()) retryTimer = setTimeout(tickRetry, 250);
}

function showError(text) {
  if (text === ui.lastError) return;
  ui.lastError = text;
  const d = el('div', 'msg msg-error');
  d.append(el('span', 'role', 'error'), el('div', 'body', text));
  $('messages').append(d);
  scrollDown();
}

function note(text) {
  $('messages').append(el('div', 'msg-note', text));
  scrollDown();
}

function fmtMs(ms) { return ms < 1000 ? Math.round(ms) + ' ms' : (ms / 1000).toFixed(1) + ' s'; }

function scrollDown(force) {
  const m = $('messages');
  if (force || m.scrollHeight - m.scrollTop - m.clientHeight < 200) m.scrollTop = m.scrollHeight;
}

// ---- streaming ----

function startStream() {
  if (ui.stream) return;
  const d = el('div', 'msg msg-assistant streaming');
  const body = el('div', 'body stream-text');
  d.append(el('span', 'role', 'assistant'), body);
  $('messages').append(d);
  ui.stream = { el: d, body, first: true, think: null };
}

function appendStream(token) {
  const s = ui.stream;
  if (s.first && ui.sentAt) {
    // How long the first token took after Send, shown on hover and kept
    // for the browser tests.
    s.firstTokenMs = Math.round(performance.now() - ui.sentAt);
    ui.sentAt = 0;
  }
  s.first = false;
  // Thinking streams between <thinking> tags, as the finished message
  // shows it; it goes into an open thinking box until its end tag.
  let rest = token;
  while (rest) {
    if (!s.think) {
      const i = rest.indexOf(thinkOpen);
      if (i < 0) {
        s.body.append(document.createTextNode(rest));
        break;
      }
      if (i > 0) s.body.append(document.createTextNode(rest.slice(0, i)));
      const det = el('details', 'thinking');
      det.open = true;
      s.think = el('div', 'thinking-text');
      det.append(el('summary', '', 'thinking'), s.think);
      s.el.insertBefore(det, s.body);
      rest = rest.slice(i + thinkOpen.length);
    } else {
      const j = rest.indexOf(thinkClose);
      if (j < 0) {
        s.think.append(document.createTextNode(rest));
        break;
      }
      s.think.append(document.createTextNode(rest.slice(0, j)));
      s.think.parentElement.open = false;
      s.think = null;
      rest = rest.slice(j + thinkClose.length).replace(/^\n+/, '');
    }
  }
  scrollDown();
}

const thinkOpen = '<thinking>\n';
const thinkClose = '\n</thinking>';

// endStream removes the streamed text, which the message that follows
// replaces; it returns how long its first token took after Send.
function endStream() {
  const s = ui.stream;
  if (!s) return undefined;
  s.el.remove();
  ui.stream = null;
  return s.firstTokenMs;
}

// ---- messages ----

const thinkingRe = /<thinking>\n?([\s\S]*?)\n?<\/thinking>/g;

function addMessage(m) {
  ui.count++;
  if (m.hide) return undefined;
  const md = m.metadata || {};
  if (md.usage) {
    ui.tokens += md.usage.totalTokens || (md.usage.input || 0) + (md.usage.output || 0);
    ui.cost += (md.usage.cost && md.usage.cost.total) || 0;
  }
  if (m.role === 'system' && m.call_id) {
    addResult(m);
    return undefined;
  }
  const d = el('div', 'msg msg-' + m.role);
  d.dataset.index = String(ui.count - 1);
  let role = m.role;
  if (md.agentd_role === 'compactionSummary') role = 'summary of earlier messages';
  else if (md.agentd_role === 'branchSummary') role = 'summary of another branch';
  const head = el('span', 'role', role);
  if (md.model) head.append(el('span', 'model', ' · ' + md.model));
  d.append(head);
  let text = m.content || '';
  if (m.role === 'assistant') {
    for (const tc of md.tool_calls || []) text = text.replace(fenceOf(tc.tooluse), '');
    text = text.replace(thinkingRe, (_, t) => {
      const det = el('details', 'thinking');
      det.append(el('summary', '', 'thinking'), el('div', 'thinking-text', t));
      d.append(det);
      return '';
    });
  }
  const body = el('div', 'body');
  body.append(render(text.trim()));
  if (text.trim()) d.append(body);
  if (md.interrupted) d.append(el('span', 'flag', 'interrupted'));
  if (md.error) {
    d.append(el('span', 'flag flag-error', md.error));
    ui.lastError = md.error; // the error event that follows says the same
  }
  if (md.agentd_role && /Summary$/.test(md.agentd_role)) {
    const det = el('details', 'summary');
    det.append(el('summary', '', role), body);
    d.replaceChildren(det);
  }
  $('messages').append(d);
  for (const tc of md.tool_calls || []) addToolCard(tc, d);
  scrollDown();
  return d;
}

function fenceOf(tu) {
  return '```' + tu.tool + (tu.args && tu.args.length ? ' ' + tu.args.join(' ') : '') + '\n' + tu.content + '\n```';
}

// ---- tool calls ----

function addToolCard(tc, msgEl) {
  ui.toolCall.set(tc.tool_id, tc.call_id);
  const card = el('div', 'tool');
  card.dataset.callId = tc.call_id;
  card.dataset.toolId = tc.tool_id;
  const head = el('div', 'tool-head');
  head.append(el('span', 'tool-name', tc.tooluse.tool), el('span', 'tool-status', ''));
  card.append(head, toolArgs(tc.tooluse));
  msgEl.append(card);
  ui.cards.set(tc.call_id, card);
  if (tc.tooluse.tool === 'todo') planFromArgs(tc.tooluse.content);
  return card;
}

function cardOf(toolID) {
  const call = ui.toolCall.get(toolID);
  return call ? ui.cards.get(call) : null;
}

function parseJSON(s) { try { return JSON.parse(s); } catch { return null; } }

function toolArgs(tu) {
  const box = el('div', 'tool-args');
  const j = parseJSON(tu.content);
  switch (tu.tool) {
    case 'bash':
      box.append(el('pre', 'cmd', '$ ' + tu.content));
      if (tu.args.length) box.append(el('div', 'args', tu.args.join(' ')));
      return box;
    case 'write':
      box.append(el('div', 'path', 'write ' + (tu.args[0] || '')));
      box.append(el('pre', 'file', tu.content));
      return box;
    case 'edit':
      if (j) {
        box.append(el('div', 'path', 'edit ' + (j.path || '')));
        const edits = j.edits || [{ oldText: j.oldText || '', newText: j.newText || '' }];
        for (const e of edits) box.append(diff(e.oldText || '', e.newText || ''));
        return box;
      }
      break;
    case 'todo':
      if (j && Array.isArray(j.todos)) {
        const ul = el('ul', 'todo-args');
        for (const t of j.todos) ul.append(el('li', 'plan-' + String(t.status).replace(/[^a-z_]/g, ''), t.content));
        box.append(ul);
        return box;
      }
      break;
    case 'ask_user':
      if (j && j.question) {
        box.append(el('div', 'question', j.question));
        if (Array.isArray(j.options)) box.append(el('div', 'args', j.options.join(' · ')));
        return box;
      }
      break;
    case 'read':
      if (j && j.path) {
        let t = 'read ' + j.path;
        if (j.offset) t += ` from line ${j.offset}`;
        if (j.limit) t += ` (${j.limit} lines)`;
        box.append(el('div', 'path', t));
        return box;
      }
      break;
  }
  if (tu.args && tu.args.length) box.append(el('div', 'args', tu.args.join(' ')));
  box.append(el('pre', 'json', tu.content));
  return box;
}

function diff(oldText, newText) {
  const pre = el('pre', 'diff');
  for (const l of oldText.split('\n')) pre.append(el('span', 'del', '-' + l + '\n'));
  for (const l of newText.split('\n')) pre.append(el('span', 'add', '+' + l + '\n'));
  return pre;
}

function addResult(m) {
  const md = m.metadata || {};
  let card = ui.cards.get(m.call_id);
  if (!card) {
    card = el('div', 'tool');
    card.dataset.callId = m.call_id;
    const head = el('div', 'tool-head');
    head.append(el('span', 'tool-name', md.tool || 'tool'), el('span', 'tool-status', ''));
    card.append(head);
    $('messages').append(card);
    ui.cards.set(m.call_id, card);
  }
  setOutput(card, m.content, md.is_error);
  card.dataset.result = '1';
  const st = card.querySelector('.tool-status');
  if (st && st.classList.contains('status-running')) { st.textContent = ''; st.className = 'tool-status'; }
  if (md.is_error) card.classList.add('tool-error');
  const tid = card.dataset.toolId;
  if (tid) settleApproval(tid);
  if (md.tool === 'ask_user') clearElicits();
  if (md.tool === 'todo') planFromResult(m.content);
  scrollDown();
}

function setOutput(card, text, isError) {
  let out = card.querySelector('.tool-output');
  if (!out) {
    out = el('pre', 'tool-output');
    card.append(out);
  }
  out.textContent = text;
  out.classList.toggle('error', !!isError);
}

function hasResult(toolID) {
  const card = cardOf(toolID);
  return !!(card && card.dataset.result);
}

function toolOutput(ev) {
  const card = cardOf(ev.tool_id);
  if (!card) return;
  setOutput(card, ev.output, false);
  // A call that runs without asking has no tool_executing: its output
  // says it runs.
  const s = card.querySelector('.tool-status');
  if (!card.dataset.result && s && !s.textContent) toolStatus(ev.tool_id, 'running', 'running…');
}

function toolComplete(ev) {
  if (ev.success) ui.failed.delete(ev.tool_id);
  else ui.failed.set(ev.tool_id, ev.duration_ms);
  toolStatus(ev.tool_id, ev.success ? 'ok' : 'failed', `${ev.success ? 'done' : 'failed'} in ${fmtMs(ev.duration_ms)}`);
}

// stopped relabels the calls an interrupt ended: they failed because
// they were stopped, which is what a person asked for.
function stopped() {
  for (const [id, ms] of ui.failed) toolStatus(id, 'stopped', `stopped after ${fmtMs(ms)}`);
  ui.failed.clear();
}

// markRunning restores, on (re)connecting, what the event stream said
// before: the calls of the message being worked on that have no result
// and wait for no one are running.
function markRunning(generating) {
  if (!generating) {
    for (const s of $('messages').querySelectorAll('.tool-status.status-running')) {
      s.textContent = '';
      s.className = 'tool-status';
    }
    return;
  }
  const last = [...$('messages').querySelectorAll('.msg-assistant')].pop();
  if (!last) return;
  // Calls are asked about in order: those after one that waits for a
  // person have not started.
  for (const card of last.querySelectorAll('.tool')) {
    const s = card.querySelector('.tool-status');
    if (!s || card.dataset.result) continue;
    if (s.classList.contains('status-waiting')) break;
    if (!s.textContent) {
      s.textContent = 'running…';
      s.className = 'tool-status status-running';
    }
  }
}

function toolStatus(toolID, cls, text) {
  const card = cardOf(toolID);
  if (!card) return;
  const s = card.querySelector('.tool-status');
  s.textContent = text;
  s.className = 'tool-status status-' + cls;
}

// ---- the plan (todo) ----

function planFromArgs(content) {
  const j = parseJSON(content);
  if (j && Array.isArray(j.todos)) showPlan(j.todos.map((t) => ({ text: t.content, status: t.status })));
}

function planFromResult(text) {
  const items = [];
  for (const line of String(text).split('\n')) {
    const m = line.match(/^- \[(x|~| )\] #\d+ (.*?)( \(in progress\))?$/);
    if (m) items.push({ text: m[2], status: m[1] === 'x' ? 'completed' : m[1] === '~' ? 'in_progress' : 'pending' });
  }
  if (items.length) showPlan(items);
}

function showPlan(items) {
  const done = items.filter((i) => i.status === 'completed' || i.status === 'done').length;
  $('plan').hidden = !items.length;
  $('plan-fill').style.width = items.length ? `${(100 * done) / items.length}%` : '0';
  $('plan-text').textContent = `${done}/${items.length} done`;
  const ul = $('plan-items');
  ul.replaceChildren(...items.map((i) => el('li', 'plan-' + String(i.status).replace(/[^a-z_]/g, ''), i.text)));
}

// ---- approvals ----

function addApproval(t) {
  if (ui.pending.has(t.tool_id)) return;
  const box = el('div', 'approval');
  box.dataset.toolId = t.tool_id;
  box.append(el('div', 'approval-title', `Run ${t.tooluse.tool}?`));
  let card = cardOf(t.tool_id);
  if (!card) {
    // Not in the log this page has (a pending call restored by the
    // snapshot): show the call with the question.
    box.append(toolArgs(t.tooluse));
  }
  const editor = el('textarea', 'approval-edit');
  editor.value = t.tooluse.content;
  editor.hidden = true;
  editor.setAttribute('aria-label', 'Edited arguments');
  const feedback = el('textarea', 'approval-feedback');
  feedback.placeholder = 'Tell the model why (optional)';
  feedback.hidden = true;
  const count = el('input', 'approval-count');
  count.type = 'number';
  count.min = '1';
  count.value = '5';
  count.setAttribute('aria-label', 'How many calls to run without asking');
  const row = el('div', 'row');
  const keys = {};
  const act = (label, cls, key, fn) => {
    const b = el('button', cls, label);
    b.type = 'button';
    b.dataset.action = label.toLowerCase();
    b.dataset.key = key;
    b.append(' ', el('kbd', '', key));
    b.title = `${label} (key ${key})`;
    b.addEventListener('click', fn);
    row.append(b);
    keys[key] = b;
    return b;
  };
  const send = async (body) => {
    // A disabled button loses focus: remember that it was here, to give
    // it back to the next card or the message box.
    box.hadFocus = box.contains(document.activeElement);
    row.querySelectorAll('button').forEach((b) => { b.disabled = true; });
    try {
      await api('POST', convPath(ui.convId) + '/tool/confirm', { tool_id: t.tool_id, ...body });
      settleApproval(t.tool_id);
      setState();
    } catch (e) {
      row.querySelectorAll('button').forEach((b) => { b.disabled = false; });
      if (e.status === 404 || e.status === 409) { settleApproval(t.tool_id); setState(); }
      banner(e.message);
    }
  };
  // Run comes first and Reject last, in the row and in the tab order.
  const run = act('Run', 'primary', 'y', () => {
    if (!editor.hidden && editor.value !== t.tooluse.content) send({ action: 'edit', content: editor.value });
    else send({ action: 'confirm' });
  });
  act('Edit', '', 'e', () => { editor.hidden = !editor.hidden; if (!editor.hidden) editor.focus(); });
  act('Skip', '', 's', () => send({ action: 'skip' }));
  act('Auto', '', 'a', () => send({ action: 'auto', count: Math.max(1, parseInt(count.value, 10) || 1) }));
  row.append(count);
  act('Always', '', 'w', () => send({ action: 'always' }));
  act('Reject', 'danger', 'n', () => {
    if (feedback.hidden) { feedback.hidden = false; feedback.focus(); return; }
    send({ action: 'reject', feedback: feedback.value });
  });
  const hint = el('div', 'note approval-keys', 'Keys: Enter or y runs, n rejects with a reason, Esc rejects. Shift+Tab in the message box comes back here.');
  box.append(editor, feedback, row, hint);
  // Keys answer the card only while focus is in it: a letter typed in
  // the message box stays a letter.
  box.addEventListener('keydown', (e) => {
    if (e.defaultPrevented || e.isComposing || e.ctrlKey || e.metaKey || e.altKey) return;
    const done = () => { e.preventDefault(); e.stopPropagation(); };
    const tgt = e.target;
    if (tgt === feedback) {
      if (e.key === 'Enter' && !e.shiftKey) { done(); send({ action: 'reject', feedback: feedback.value }); }
      else if (e.key === 'Escape') { done(); feedback.hidden = true; run.focus(); }
      return;
    }
    if (tgt === editor) {
      if (e.key === 'Escape') { done(); editor.hidden = true; run.focus(); }
      return;
    }
    if (tgt === count) {
      if (e.key === 'Enter') { done(); keys.a.click(); }
      else if (e.key === 'Escape') { done(); run.focus(); }
      return;
    }
    if (tgt.matches && tgt.matches('input, textarea, select')) return;
    // A key held down since the message was sent repeats into the card
    // when it appears: only a fresh press answers.
    if (e.repeat) { if (e.key === 'Enter' || e.key in keys) done(); return; }
    if (e.key === 'Escape') { done(); send({ action: 'reject', feedback: '' }); return; }
    if (e.key === 'Enter' && tgt.tagName === 'BUTTON') return; // the button's own click
    const b = e.key === 'Enter' ? run : keys[e.key];
    if (b && !b.disabled) { done(); b.click(); }
  });
  if (card) card.append(box);
  else $('pending').append(box);
  ui.pending.set(t.tool_id, box);
  const st = card && card.querySelector('.tool-status');
  if (st) { st.textContent = 'waiting for you'; st.className = 'tool-status status-waiting'; }
  scrollDown();
  if (ui.pending.size === 1 && mayTakeFocus()) run.focus();
}

// mayTakeFocus says whether an approval that appears may move focus to
// itself: not from a person typing somewhere (a message half written,
// a rename, an answer), who would otherwise type into the card.
function mayTakeFocus() {
  const a = document.activeElement;
  if (!a || a === document.body) return true;
  if (a === $('prompt')) return !a.value.trim();
  if (a.closest('.approval, .elicit')) return false;
  return !a.matches('input, textarea, select, [contenteditable]');
}

// focusNextApproval moves focus to the next card waiting, or back to the
// message box.
function focusNextApproval() {
  const next = ui.pending.values().next().value;
  const b = next && next.querySelector('button[data-action=run]');
  if (b) b.focus();
  else if (!$('prompt').disabled) $('prompt').focus();
}

function settleApproval(toolID) {
  const box = ui.pending.get(toolID);
  if (!box) return;
  const a = document.activeElement;
  const focused = box.contains(a) || (box.hadFocus && (!a || a === document.body));
  box.remove();
  ui.pending.delete(toolID);
  if (focused) focusNextApproval();
  const card = cardOf(toolID);
  const st = card && card.querySelector('.tool-status');
  if (st && st.classList.contains('status-waiting')) { st.textContent = ''; st.className = 'tool-status'; }
}

function clearPending() {
  for (const id of [...ui.pending.keys()]) settleApproval(id);
  clearElicits();
}

// ---- questions of the model ----

function addElicit(q) {
  if (ui.elicits.has(q.elicit_id)) return;
  const form = el('form', 'elicit card');
  form.dataset.elicitId = q.elicit_id;
  form.append(el('div', 'elicit-prompt', q.prompt));
  if (q.description) form.append(el('div', 'note', q.description));
  const get = [];
  const input = (type, value, label) => {
    const i = el('input');
    i.type = type;
    if (value !== undefined && value !== null) i.value = String(value);
    if (label) i.setAttribute('aria-label', label);
    return i;
  };
  const field = (f, parent) => {
    const wrap = el('label', 'field');
    wrap.append(el('span', '', f.prompt || f.name));
    let read;
    if (f.type === 'boolean') {
      const i = input('checkbox');
      i.checked = !!f.default;
      wrap.append(i);
      read = () => i.checked;
    } else if (f.type === 'choice' && f.options) {
      const s = el('select');
      for (const o of f.options) { const op = el('option', '', o); op.value = o; s.append(op); }
      if (f.default) s.value = f.default;
      wrap.append(s);
      read = () => s.value;
    } else {
      const i = input(f.type === 'number' || f.type === 'integer' ? 'number' : 'text', f.default, f.name);
      if (f.required) i.required = true;
      wrap.append(i);
      read = () => (i.type === 'number' && i.value !== '' ? Number(i.value) : i.value);
    }
    parent.append(wrap);
    return read;
  };
  let value;
  switch (q.elicit_type) {
    case 'choice':
    case 'multi_choice': {
      const multi = q.elicit_type === 'multi_choice';
      const boxes = (q.options || []).map((o, i) => {
        const l = el('label', 'option');
        const r = input(multi ? 'checkbox' : 'radio', o);
        r.name = 'opt-' + q.elicit_id;
        if (!multi && i === 0) r.checked = true;
        l.append(r, document.createTextNode(' ' + o));
        form.append(l);
        return r;
      });
      value = () => (multi ? boxes.filter((b) => b.checked).map((b) => b.value) : (boxes.find((b) => b.checked) || {}).value);
      break;
    }
    case 'confirmation':
      value = () => true;
      break;
    case 'form':
      for (const f of q.fields || []) { const r = field(f, form); get.push([f.name, r]); }
      break;
    default: {
      const t = q.elicit_type === 'secret' ? input('password', '', 'Answer') : el('textarea');
      if (q.elicit_type !== 'secret') { t.value = q.default || ''; t.setAttribute('aria-label', 'Answer'); }
      form.append(t);
      value = () => t.value;
    }
  }
  const row = el('div', 'row');
  const yes = el('button', 'primary', q.elicit_type === 'confirmation' ? 'Yes' : 'Answer');
  yes.type = 'submit';
  const no = el('button', '', q.elicit_type === 'confirmation' ? 'No' : 'Decline');
  no.type = 'button';
  row.append(yes, no);
  form.append(row);
  const respond = async (body) => {
    row.querySelectorAll('button').forEach((b) => { b.disabled = true; });
    try {
      await api('POST', convPath(ui.convId) + '/elicit/respond', { elicit_id: q.elicit_id, ...body });
      settleElicit(q.elicit_id);
    } catch (e) {
      row.querySelectorAll('button').forEach((b) => { b.disabled = false; });
      if (e.status === 404 || e.status === 409) settleElicit(q.elicit_id);
      banner(e.message);
    }
    setState();
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    if (q.elicit_type === 'form') respond({ action: 'accept', values: Object.fromEntries(get.map(([n, r]) => [n, r()])) });
    else respond({ action: 'accept', value: value() });
  });
  no.addEventListener('click', () => respond({ action: 'decline' }));
  $('pending').append(form);
  ui.elicits.set(q.elicit_id, form);
  scrollDown();
}

function settleElicit(id) {
  const f = ui.elicits.get(id);
  if (f) { f.remove(); ui.elicits.delete(id); }
}

function clearElicits() { for (const id of [...ui.elicits.keys()]) settleElicit(id); }

// ---- composing, sending, interrupting ----

// ---- attaching files ----

// Files chosen for the next message: uploaded to the conversation when
// it is sent (the server keeps them beside the conversation) and named
// in its files; images reach the model as images, text files as text.
const MAX_ATTACHED = 10;
ui.attached = [];

function showAttached() {
  const box = $('attached');
  box.replaceChildren();
  ui.attached.forEach((f, i) => {
    const chip = el('span', 'chip', f.name);
    const x = el('button', '', '\u00d7');
    x.type = 'button';
    x.title = 'Remove ' + f.name;
    x.setAttribute('aria-label', 'Remove ' + f.name);
    x.addEventListener('click', () => { ui.attached.splice(i, 1); showAttached(); });
    chip.append(x);
    box.append(chip);
  });
  box.hidden = !ui.attached.length;
}

$('attach-btn').addEventListener('click', () => { if (!$('prompt').disabled) $('attach').click(); });
$('attach').addEventListener('change', () => {
  for (const f of $('attach').files) {
    if (ui.attached.length >= MAX_ATTACHED) { banner(`At most ${MAX_ATTACHED} files a message.`); break; }
    ui.attached.push(f);
  }
  $('attach').value = '';
  showAttached();
  $('prompt').focus();
});

// upload sends files to conversation id and returns their paths for a
// message's files.
async function upload(id, files) {
  const form = new FormData();
  for (const f of files) form.append('file', f, f.name);
  let res;
  try {
    res = await fetch(convPath(id) + '/workspace/upload', { method: 'POST', body: form, credentials: 'same-origin' });
  } catch (e) {
    throw new APIError(0, 'The server cannot be reached: ' + e.message);
  }
  let data = null;
  try { data = await res.json(); } catch { data = null; }
  if (!res.ok) {
    if (res.status === 401) showLogin();
    throw new APIError(res.status, 'The files could not be attached: ' + ((data && data.error) || `${res.status} ${res.statusText}`));
  }
  return data.files.map((f) => f.path);
}

async function sendPrompt() {
  const ta = $('prompt');
  // Blank lines around the text are dropped; indentation is kept.
  const text = ta.value.replace(/^(\s*\n)+/, '').replace(/(\n\s*)+$/, '');
  if (!text.trim() && !ui.attached.length) return;
  if (!ui.convId) {
    if (!ui.welcomeModel) return;
    banner('');
    try {
      await startWith(text || ui.attached[0].name);
    } catch (e) {
      banner('The conversation could not be started: ' + e.message);
      return;
    }
  }
  banner('');
  ta.value = '';
  ui.sentAt = performance.now();
  const files = ui.attached.slice();
  try {
    const msg = { role: 'user', content: text };
    if (files.length) {
      msg.files = await upload(ui.convId, files);
      ui.attached = [];
      showAttached();
    }
    const r = await api('POST', convPath(ui.convId), msg);
    if (r && r.command !== undefined) {
      // A built-in command ran on the server: its output, no step.
      commandOutput(r.command, r.output);
      return;
    }
    // Sent before the event stream said hello: wait for its attachment.
    for (let i = 0; i < 50 && !ui.sessionId; i++) await new Promise((r) => setTimeout(r, 100));
    await api('POST', convPath(ui.convId) + '/step', { session_id: ui.sessionId });
  } catch (e) {
    if (e.status === 409 && !ta.value) ta.value = text;
    // A model failure reaches the event stream too (and may be retried):
    // it is shown there, once.
    if (e.status !== 500) banner(e.message);
  }
}

async function interrupt() {
  if (!ui.convId) return;
  try {
    await api('POST', convPath(ui.convId) + '/interrupt', { session_id: ui.sessionId });
  } catch (e) { banner(e.message); }
}

$('composer').addEventListener('submit', (e) => { e.preventDefault(); sendPrompt(); });
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); sendPrompt(); }
  // Backwards from the message box, a card waiting for an answer is
  // the first stop, at its Run (not at Reject, the last of its row).
  if (e.key === 'Tab' && e.shiftKey && ui.pending.size) {
    const b = ui.pending.values().next().value.querySelector('button[data-action=run]');
    if (b && !b.disabled) { e.preventDefault(); b.focus(); }
  }
});
$('interrupt').addEventListener('click', interrupt);
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && !e.defaultPrevented && (ui.generating || ui.pending.size || ui.elicits.size)) { e.preventDefault(); interrupt(); }
});

// ---- slash commands and context files ----

ui.commands = [];
const slash = attachSlash($('prompt'), $('slash-list'), () => ui.commands);

async function loadCommands(my) {
  try {
    const r = await api('GET', convPath(ui.convId) + '/commands');
    if (my !== ui.open) return;
    ui.commands = (r && r.commands) || [];
    slash.update();
  } catch { ui.commands = []; }
}

// commandOutput shows what a built-in command said (as text).
function commandOutput(name, out) {
  const d = el('div', 'msg msg-command');
  d.append(el('span', 'role', '/' + name), el('pre', 'body', out || 'done'));
  $('messages').append(d);
  scrollDown(true);
}

// showContextFiles lists the files the conversation's system prompt was
// built from (AGENTS.md, SYSTEM.md, ...).
function showContextFiles(files) {
  const d = $('context-files');
  files = files || [];
  d.hidden = files.length === 0;
  d.querySelector('summary').textContent = 'Instructions from ' + files.length + (files.length === 1 ? ' file' : ' files');
  d.querySelector('ul').replaceChildren(...files.map((f) => el('li', '', f.path + (f.truncated ? ' (cut to ' + f.included + ' of ' + f.bytes + ' bytes)' : ''))));
}

// ---- start ----

function route() {
  const m = location.hash.match(/^#\/c\/(.+)$/);
  const id = m ? decodeURIComponent(m[1]) : null;
  if (id !== ui.convId || (id && !ui.es && !ui.opening)) openConversation(id);
}

let booted = false;
async function boot() {
  try {
    await api('GET', `${API}/models`);
  } catch (e) {
    if (e.status === 401) return;
    banner(e.message);
  }
  $('login').hidden = true;
  $('app').hidden = false;
  // A server that needs a token refuses a request without one: then a
  // sign-out is worth offering.
  fetch(`${API}/models`, { credentials: 'omit' }).then((r) => { $('logout').hidden = r.status !== 401; }).catch(() => {});
  if (!booted) {
    booted = true;
    window.addEventListener('hashchange', route);
  }
  ui.convId = undefined;
  route();
  refreshList();
}

boot();
