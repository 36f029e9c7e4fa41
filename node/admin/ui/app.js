// tether's cluster page: the admin API's JSON, kept current by the
// GET /v1/events stream (no polling). The admin token, when the node needs
// one, is asked for once, kept in this tab's sessionStorage and sent as a
// bearer header, never as a cookie.

import { EventStream } from './sse.js';

const TOKEN_KEY = 'tether.adminToken';
const TIMELINE_MAX = 300;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  hello: null,
  status: null,
  members: [],
  keyring: { active_key_id: '', keys: [] },
  clusters: [], // ids
  destinations: new Map(), // cluster id → answer of /destinations
  events: [], // newest first
  seen: new Set(),
};

class AuthError extends Error {}

// ---------- formatting ----------

const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
const dateTime = new Intl.DateTimeFormat(undefined, {
  year: 'numeric', month: 'short', day: '2-digit',
  hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
});
const timeOnly = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const rate = new Intl.NumberFormat(undefined, { minimumFractionDigits: 1, maximumFractionDigits: 1 });

function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime()) || d.getFullYear() < 1971) return '';
  return dateTime.format(d);
}

function fmtClock(iso) {
  const d = new Date(iso);
  const today = new Date();
  return d.toDateString() === today.toDateString() ? timeOnly.format(d) : dateTime.format(d);
}

function timeEl(iso, text) {
  const t = h('time', { datetime: iso, title: `${fmtTime(iso)} (${zone})` }, text ?? fmtTime(iso));
  return t;
}

// Each state is told by a symbol and its name, the colour only repeats it.
const SYMBOLS = {
  alive: '●', suspect: '◐', dead: '✕', left: '○', removed: '○',
  healthy: '●', unhealthy: '✕', unknown: '?',
  active: '●', installed: '◔', inactive: '○', expired: '○', revoked: '✕', pruned: '○',
  voter: '', nonvoter: '', none: '',
};

function badge(value, kind) {
  const v = value || 'unknown';
  const sym = SYMBOLS[v];
  return h('span', { class: `badge ${kind || ''} st-${v}` },
    sym ? h('span', { class: 'sym', 'aria-hidden': 'true' }, sym) : null,
    h('span', { class: 'state' }, v));
}

// ---------- DOM ----------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (sel) => document.querySelector(sel);

// replace swaps a container's content, keeping keyboard focus on the
// control with the same data-focus key.
function replace(container, ...children) {
  const focused = document.activeElement?.dataset?.focus;
  container.replaceChildren(...children.flat().filter(Boolean));
  if (focused) {
    const again = container.querySelector(`[data-focus="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
}

function cell(label, content, cls) {
  return h('td', { 'data-label': label, class: cls }, content);
}

function toast(msg, kind) {
  const el = $('#toast');
  $('#toast-text').textContent = msg;
  el.dataset.kind = kind || 'info';
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.hidden = true; }, 8000);
}

// ---------- admin API ----------

function authHeaders() {
  return state.token ? { Authorization: `Bearer ${state.token}` } : {};
}

async function api(method, path) {
  const resp = await fetch(path, {
    method, headers: { Accept: 'application/json', ...authHeaders() }, cache: 'no-store', credentials: 'omit',
  });
  if (resp.status === 401) throw new AuthError('the admin token was refused');
  let body = null;
  try { body = await resp.json(); } catch { /* not JSON */ }
  if (!resp.ok) throw new Error(body?.error || `${method} ${path}: HTTP ${resp.status}`);
  return body;
}

let tokenPrompt = null;

// askToken shows the token dialog once; callers wait for the same answer.
function askToken(message) {
  if (tokenPrompt) return tokenPrompt;
  const dlg = $('#token-dialog');
  $('#token-msg').textContent = message;
  $('#token-input').value = '';
  setConn('unauthorized', 'admin token needed');
  tokenPrompt = new Promise((resolve) => {
    dlg.addEventListener('close', function onClose() {
      dlg.removeEventListener('close', onClose);
      const tok = $('#token-input').value.trim();
      state.token = tok;
      if (tok) sessionStorage.setItem(TOKEN_KEY, tok);
      tokenPrompt = null;
      resolve();
    });
  });
  dlg.showModal();
  return tokenPrompt;
}

function tokenMessage() {
  if (state.token) {
    sessionStorage.removeItem(TOKEN_KEY);
    return 'The node refused this token. Enter the admin token (the contents of --admin-token-file).';
  }
  return 'This node needs its admin token (the contents of --admin-token-file). It stays in this tab only and is sent as a bearer header, never as a cookie.';
}

// guarded runs fn, asking for the token when the node refuses it.
async function guarded(fn) {
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!(err instanceof AuthError)) throw err;
      await askToken(tokenMessage());
      stream.wake();
    }
  }
}

// ---------- loading ----------

async function loadStatus() {
  state.status = await api('GET', '/v1/status');
  renderSummary();
}

async function loadMembers() {
  const [m] = await Promise.all([api('GET', '/v1/members'), loadStatus()]);
  state.members = m.members || [];
  renderMembers();
}

async function loadKeyring() {
  state.keyring = await api('GET', '/v1/keyring');
  renderKeyring();
  renderSummary();
}

async function loadDestinations(cluster) {
  const d = await api('GET', `/v1/clusters/${encodeURIComponent(cluster)}/destinations`);
  state.destinations.set(cluster, d);
  renderCluster(cluster);
}

async function loadClusters() {
  const c = await api('GET', '/v1/clusters');
  state.clusters = c.clusters || [];
  for (const id of [...state.destinations.keys()]) {
    if (!state.clusters.includes(id)) state.destinations.delete(id);
  }
  renderClusters();
  await Promise.all(state.clusters.map(loadDestinations));
}

async function loadAll() {
  await guarded(() => Promise.all([loadMembers(), loadKeyring(), loadClusters()]));
}

// Reloads after events are coalesced per resource.
const pending = new Map();
function reload(key, fn) {
  if (pending.has(key)) return;
  pending.set(key, setTimeout(async () => {
    pending.delete(key);
    try {
      await guarded(fn);
    } catch (err) {
      toast(err.message, 'error');
    }
  }, 80));
}

// ---------- rendering ----------

function setConn(kind, text) {
  const el = $('#conn');
  el.dataset.state = kind;
  $('#conn-text').textContent = text;
}

function renderSummary() {
  const s = state.status;
  if (!s) return;
  const leader = s.leader_id || '';
  const el = $('#summary');
  el.dataset.leader = leader;
  replace(el,
    h('span', { class: 'item' }, 'leader ', h('strong', { id: 'leader' }, leader || 'none')),
    h('span', { class: 'item' }, h('span', { class: 'num' }, integer.format(s.members ?? state.members.length)), ' members'),
    h('span', { class: 'item' }, 'active key ', h('code', {}, state.keyring.active_key_id || s.active_key_id || 'none')),
    h('span', { class: 'item' }, `${s.node_id} applied index `, h('span', { class: 'num', id: 'applied' }, integer.format(s.applied_index))),
    h('span', { class: 'item' }, 'config version ', h('span', { class: 'num', id: 'config-version' }, integer.format(s.config_version || 0))),
    ...(s.acme || []).map((a) => h('span', { class: 'item', 'data-acme': a.failures ? 'failing' : 'ok' },
      `certificate ${(a.domains || []).join(', ')} until `, h('code', {}, a.not_after ? fmtClock(a.not_after) : 'none yet'),
      a.failures ? ` (${a.failures} failed orders: ${a.last_error})` : '')),
  );
}

function renderMembers() {
  const rows = state.members.map((m) => h('tr', { 'data-member': m.id, 'data-state': m.state, 'data-leader': m.leader ? 'true' : 'false' },
    cell('Node', [h('strong', {}, m.id), m.leader ? h('span', { class: 'badge leader' }, '★ leader') : null,
      state.hello && m.id === state.hello.node ? h('span', { class: 'badge here' }, 'this page') : null]),
    cell('Address', h('span', { class: 'addr' }, m.address || m.raft_address || '—')),
    cell('Gossip', badge(m.state)),
    cell('Raft', h('span', { class: `role role-${m.raft}` }, m.raft)),
    cell('Version', m.version || '—'),
    cell('Durable index', h('span', { class: 'num w9', 'data-stat': 'durable', title: 'the replicated state this member holds on disk, as gossip reports it' }, integer.format(m.durable_index || 0)), 'num'),
    cell('Config', [h('span', { class: 'num', 'data-stat': 'config', title: "the version of the cluster's config it serves (0: its own file's)" }, integer.format(m.config_version || 0)),
      m.config_error ? h('span', { class: 'badge', 'data-config-error': 'true', title: m.config_error }, ` cannot apply: ${m.config_error}`) : null], 'num'),
  ));
  replace($('#members tbody'), rows.length ? rows : h('tr', {}, h('td', { colspan: 7 }, 'no members known')));
  $('#members-count').textContent = `(${state.members.length})`;
}

function renderKeyring() {
  const keys = [...(state.keyring.keys || [])].sort((a, b) => (b.created || '').localeCompare(a.created || ''));
  const rows = keys.map((k) => {
    const revocable = k.state !== 'revoked';
    return h('tr', { 'data-key': k.id, 'data-state': k.state },
      cell('Key', h('code', {}, k.id)),
      cell('State', badge(k.state)),
      cell('Created', timeEl(k.created)),
      cell('Activates', k.state === 'installed'
        ? h('span', { title: 'it activates once every alive member holds it (at most 10 s)' }, 'once every member holds it')
        : timeEl(k.activates)),
      cell('Expires', timeEl(k.expires)),
      cell('', revocable
        ? h('button', { type: 'button', class: 'danger small', 'data-focus': `revoke-${k.id}`, 'data-action': 'revoke', onclick: () => revokeKey(k.id, k.state) }, 'Revoke')
        : null, 'actions'),
    );
  });
  replace($('#keys tbody'), rows.length ? rows : h('tr', {}, h('td', { colspan: 6 }, 'no keys')));
}

function renderClusters() {
  const root = $('#clusters');
  const have = new Set([...root.children].map((c) => c.dataset.cluster));
  for (const id of state.clusters) {
    if (!have.has(id)) root.append(h('section', { class: 'cluster', 'data-cluster': id, 'aria-label': `cluster ${id}` }));
  }
  for (const el of [...root.children]) {
    if (!state.clusters.includes(el.dataset.cluster)) el.remove();
  }
  if (state.clusters.length === 0) replace(root, h('p', {}, 'no clusters configured'));
}

const OUTCOMES = [['routed', 'routed'], ['failed_open', 'failed open'], ['failed_closed', 'failed closed'], ['no_session', 'no session']];

function renderCluster(id) {
  const sec = document.querySelector(`#clusters section[data-cluster="${CSS.escape(id)}"]`);
  const d = state.destinations.get(id);
  if (!sec || !d) return;
  const node = state.hello?.node || state.status?.node_id || 'this node';
  const aff = d.affinity || {};
  const rows = (d.destinations || []).map((x) => h('tr', { 'data-dest': x.id, 'data-draining': x.draining ? 'true' : 'false', 'data-drain-state': x.drain_state || 'none' },
    cell('Destination', h('strong', {}, x.id)),
    cell('Address', h('span', { class: 'addr' }, x.address)),
    cell(`Health on ${node}`, badge(x.health?.local)),
    cell('Cluster health', badge(x.health?.cluster)),
    cell('Probers', (x.probers || []).length ? x.probers.join(', ') : '—'),
    cell('Draining', x.draining
      ? h('span', { class: 'drain' }, h('span', { class: 'badge st-draining' }, h('span', { class: 'sym', 'aria-hidden': 'true' }, '↓'),
        h('span', { class: 'state' }, 'draining')),
      h('span', { class: 'until' }, 'until ', timeEl(x.drain_deadline, fmtClock(x.drain_deadline))))
      : x.drain_state === 'drained'
        ? h('span', { class: 'drain' }, h('span', { class: 'badge st-drained' }, h('span', { class: 'sym', 'aria-hidden': 'true' }, '■'),
          h('span', { class: 'state' }, 'drained')),
        h('span', { class: 'until' }, 'since ', timeEl(x.drained_since, fmtClock(x.drained_since))))
        : h('span', { class: 'muted' }, 'no')),
    cell('In flight', h('span', { class: 'num w6', 'data-stat': 'inflight' }, integer.format(x.inflight || 0)), 'num'),
    cell('Req/s', h('span', { class: 'num w7', 'data-stat': 'rps' }, rate.format(x.requests_per_second || 0)), 'num'),
    cell('Requests', h('span', { class: 'num w9', 'data-stat': 'total' }, integer.format(x.requests_total || 0)), 'num'),
    cell('', x.draining || x.drain_state === 'drained'
      ? h('button', { type: 'button', class: 'small', 'data-focus': `undrain-${id}-${x.id}`, 'data-action': 'undrain', onclick: () => setDrain(id, x.id, false) }, 'Undrain')
      : h('button', { type: 'button', class: 'danger small', 'data-focus': `drain-${id}-${x.id}`, 'data-action': 'drain', onclick: () => setDrain(id, x.id, true) }, 'Drain'),
    'actions'),
  ));
  replace(sec,
    h('h3', {}, 'Cluster ', h('code', {}, id)),
    h('dl', { class: 'affinity', 'aria-label': `affinity outcomes on ${node}` },
      h('dt', {}, `Affinity on ${node}:`),
      OUTCOMES.map(([k, label]) => h('div', { class: 'outcome' },
        h('dt', {}, label), h('dd', { class: 'num w9', 'data-outcome': k }, integer.format(aff[k] || 0))))),
    h('div', { class: 'table-wrap' }, h('table', { class: 'dests' },
      h('caption', { class: 'visually-hidden' }, `Destinations of cluster ${id}`),
      h('thead', {}, h('tr', {},
        ['Destination', 'Address', `Health on ${node}`, 'Cluster health', 'Probers', 'Draining'].map((t) => h('th', { scope: 'col' }, t)),
        ['In flight', 'Req/s', 'Requests'].map((t) => h('th', { scope: 'col', class: 'num' }, t)),
        h('th', { scope: 'col' }, h('span', { class: 'visually-hidden' }, 'Actions')))),
      h('tbody', {}, rows))),
  );
}

// applyStats updates the figures in place: no re-render, no reload.
function applyStats(data) {
  if (state.status && data.applied_index !== undefined && data.applied_index !== state.status.applied_index) {
    state.status.applied_index = data.applied_index;
    const el = $('#applied');
    if (el) el.textContent = integer.format(data.applied_index);
  }
  for (const [id, idx] of Object.entries(data.durable_index || {})) {
    const m = state.members.find((x) => x.id === id);
    if (m) m.durable_index = idx;
    const el = document.querySelector(`#members tr[data-member="${CSS.escape(id)}"] [data-stat="durable"]`);
    if (el) el.textContent = integer.format(idx);
  }
  for (const c of data.clusters || []) {
    const d = state.destinations.get(c.cluster);
    const sec = document.querySelector(`#clusters section[data-cluster="${CSS.escape(c.cluster)}"]`);
    if (!d || !sec) continue;
    d.affinity = c.affinity;
    for (const [k] of OUTCOMES) {
      const el = sec.querySelector(`[data-outcome="${k}"]`);
      if (el) el.textContent = integer.format(c.affinity?.[k] || 0);
    }
    for (const x of c.destinations || []) {
      const known = (d.destinations || []).find((y) => y.id === x.id);
      if (known) Object.assign(known, { inflight: x.inflight, requests_total: x.requests_total, requests_per_second: x.requests_per_second });
      const row = sec.querySelector(`tr[data-dest="${CSS.escape(x.id)}"]`);
      if (!row) continue;
      row.querySelector('[data-stat="inflight"]').textContent = integer.format(x.inflight || 0);
      row.querySelector('[data-stat="rps"]').textContent = rate.format(x.requests_per_second || 0);
      row.querySelector('[data-stat="total"]').textContent = integer.format(x.requests_total || 0);
    }
  }
}

function describe(e) {
  const d = e.data || {};
  const dest = () => `${d.cluster}/${d.destination}`;
  switch (e.type) {
    case 'leader':
      return d.leader ? `${d.leader} became leader${d.previous ? ` (was ${d.previous})` : ''}` : `no leader (was ${d.previous || 'none'})`;
    case 'member':
      switch (d.change) {
        case 'joined': return `${d.id} joined (${d.state}, ${d.raft})`;
        case 'removed': return `${d.id} removed (was ${d.previous})`;
        case 'state': return `${d.id} ${d.previous} → ${d.state}`;
        case 'raft': return `${d.id} ${d.previous_raft} → ${d.raft}`;
        default: return `${d.id} updated (version ${d.version || '?'}, ${d.address || ''})`;
      }
    case 'key':
      return d.previous ? `key ${d.id} ${d.previous} → ${d.state}` : `key ${d.id} ${d.state}`;
    case 'health':
      return `${dest()} ${d.view === 'local' ? 'local' : 'cluster'} health ${d.previous} → ${d.state}`;
    case 'drain':
      if (d.state === 'drained') return `${dest()} drained since ${fmtClock(d.since)}`;
      return d.draining ? `${dest()} draining until ${fmtClock(d.deadline)}` : `${dest()} drain ended`;
    case 'config':
      return d.error ? `config version ${d.version} cannot be applied here (serving ${d.serving}): ${d.error}` : `config version ${d.version} applied`;
    case 'acme':
      return d.result === 'obtained'
        ? `certificate for ${(d.domains || []).join(', ')} obtained by ${d.by || '?'}, valid until ${fmtClock(d.not_after)}`
        : `certificate for ${(d.domains || []).join(', ')}: order failed (${d.failures} in a row, next try ${fmtClock(d.next_attempt)}): ${d.error}`;
    default:
      return e.type;
  }
}

function eventState(e) {
  const d = e.data || {};
  if (e.type === 'drain') return d.state || (d.draining ? 'draining' : 'undrained');
  if (e.type === 'acme') return d.result || '';
  return d.state || '';
}

function renderTimeline() {
  const items = state.events.map((e) => h('li', { 'data-type': e.type, 'data-id': e.data?.id || e.data?.destination || '', 'data-state': eventState(e) },
    h('span', { class: 'when' }, timeEl(e.time, fmtClock(e.time))),
    h('span', { class: `kind kind-${e.type}` }, e.type),
    h('span', { class: 'what' }, describe(e)),
    h('span', { class: 'seen-by' }, `seen by ${e.node}`),
  ));
  replace($('#events'), items.length ? items : h('li', { class: 'muted' }, 'nothing happened yet'));
}

// ---------- actions ----------

function confirmAction(message, okLabel) {
  const dlg = $('#confirm-dialog');
  $('#confirm-msg').textContent = message;
  $('#confirm-ok').textContent = okLabel;
  dlg.returnValue = '';
  return new Promise((resolve) => {
    dlg.addEventListener('close', function onClose() {
      dlg.removeEventListener('close', onClose);
      resolve(dlg.returnValue === 'ok');
    });
    dlg.showModal();
    $('#confirm-cancel').focus(); // the safe choice has the focus
  });
}

async function act(fn) {
  try {
    await guarded(fn);
  } catch (err) {
    toast(err.message, 'error');
  }
}

async function rotateKey() {
  if (!await confirmAction('Rotate the keyring? A new key is installed on every node and becomes active once every alive member holds it (at most 10 s). Existing sessions keep working.', 'Rotate')) return;
  await act(async () => {
    const r = await api('POST', '/v1/keyring/rotate');
    $('#rotate').dataset.lastKey = r.id;
    toast(`Key ${r.id} installed; it becomes active once every member holds it.`);
    await loadKeyring();
  });
}

async function revokeKey(id, keyState) {
  const extra = keyState === 'active' ? ' It is the active key: a replacement becomes active in the same step.' : '';
  if (!await confirmAction(`Revoke key ${id}? Values sealed with it stop opening at once, on every node, and those sessions are re-balanced.${extra}`, 'Revoke')) return;
  await act(async () => {
    await api('POST', `/v1/keyring/${encodeURIComponent(id)}/revoke`);
    toast(`Key ${id} revoked.`);
    await loadKeyring();
  });
}

async function setDrain(cluster, dest, on) {
  const msg = on
    ? `Drain ${dest} in cluster ${cluster}? It takes no new sessions on any node; its existing sessions stay until the cluster's drain timeout.`
    : `End the drain of ${dest} in cluster ${cluster}? It takes new sessions again.`;
  if (!await confirmAction(msg, on ? 'Drain' : 'Undrain')) return;
  await act(async () => {
    const path = `/v1/clusters/${encodeURIComponent(cluster)}/destinations/${encodeURIComponent(dest)}/drain`;
    await api(on ? 'POST' : 'DELETE', path);
    toast(on ? `${cluster}/${dest} is draining.` : `${cluster}/${dest} takes new sessions again.`);
    await loadDestinations(cluster);
  });
}

// ---------- the stream ----------

function onEvent(e) {
  const ev = e.data;
  switch (e.type) {
    case 'hello': {
      const first = !state.hello;
      const restarted = state.hello && state.hello.data.boot !== ev.data.boot;
      state.hello = { node: ev.node, data: ev.data };
      const conn = $('#conn');
      conn.dataset.node = ev.node;
      conn.dataset.boot = ev.data.boot;
      setConn('live', `live · connected to ${ev.node} (${ev.data.admin}) · version ${ev.data.version} · up since ${fmtClock(ev.data.started)}`);
      document.title = `tether · ${ev.node}`;
      if (restarted) toast(`${ev.node} restarted; the page reconnected.`);
      // After any (re)connection the view may be stale: reload it all.
      reload('all', loadAll);
      if (first || restarted) renderMembers();
      return;
    }
    case 'stats':
      applyStats(ev.data);
      return;
    default:
      break;
  }
  if (e.id && state.seen.has(e.id)) return;
  if (e.id) state.seen.add(e.id);
  state.events.unshift(ev);
  if (state.events.length > TIMELINE_MAX) state.events.length = TIMELINE_MAX;
  renderTimeline();
  switch (e.type) {
    case 'leader':
    case 'member':
    case 'config':
      reload('members', loadMembers);
      break;
    case 'key':
      reload('keyring', loadKeyring);
      break;
    case 'health':
    case 'drain':
      reload(`dest:${ev.data.cluster}`, () => loadDestinations(ev.data.cluster));
      break;
    default:
      break;
  }
}

function onState(s, detail) {
  switch (s) {
    case 'connecting':
      setConn('connecting', 'connecting…');
      break;
    case 'reconnecting': {
      const who = state.hello ? state.hello.node : 'the node';
      const secs = detail.retryIn ? ` in ${Math.ceil(detail.retryIn / 1000)} s` : '';
      setConn('reconnecting', `lost ${who}; reconnecting${secs}…`);
      break;
    }
    case 'unauthorized':
      askToken(tokenMessage()).then(() => stream.wake());
      break;
    default:
      break;
  }
}

const stream = new EventStream('/v1/events', { headers: authHeaders, onEvent, onState });

// ---------- start ----------

function start() {
  $('#zone').textContent = `Times in ${zone}.`;
  $('#rotate').addEventListener('click', rotateKey);
  $('#toast-close').addEventListener('click', () => { $('#toast').hidden = true; });
  $('#token-form').addEventListener('submit', () => { /* method=dialog closes it */ });
  renderTimeline();
  stream.start();
}

start();
