// The xce console: reads the cluster through the node's own API (Connect
// protocol, JSON), live from WatchStatus and WatchAssignment, with the
// caller's identity. Every value from the server is written as text, never
// as markup.
'use strict';

const PAGE_SIZE = 50;
const ACTIVITY_MAX = 300;
const POLL_MS = 2000;
const STALE = 'CONSISTENCY_STALE';

const $ = (id) => document.getElementById(id);

// el builds an element: attrs sets attributes (class, text, and any other),
// children are nodes or strings.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = String(v);
    else if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function fill(parent, ...children) {
  parent.replaceChildren(...children.filter((c) => c !== undefined && c !== null && c !== false));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const roleName = (r) => (r || 'ROLE_UNSPECIFIED').replace('ROLE_', '');
const num = (v) => Number(v || 0);
const clock = (d) => d.toLocaleTimeString([], { hour12: false });

function ago(ms) {
  ms = num(ms);
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

// ---- API -----------------------------------------------------------------

class RPCError extends Error {
  constructor(code, message) {
    super(message || code);
    this.code = code;
  }
}

const state = {
  token: sessionStorage.getItem('xce.token') || '',
  who: null,
  status: null,
  members: [],
  workers: null,
  tasks: { prefix: '', tokens: [''], page: 0, rows: [], placements: new Map(), next: '' },
  detail: '',
  leaders: [],
  watchGen: null,
  stop: new AbortController(),
};

function headers(contentType) {
  const h = { 'Content-Type': contentType, 'Connect-Protocol-Version': '1' };
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

function rpcError(status, text) {
  let j = {};
  try { j = JSON.parse(text); } catch (_) { /* not JSON */ }
  const code = j.code || (status === 401 ? 'unauthenticated' : status === 403 ? 'permission_denied' : `http_${status}`);
  return new RPCError(code, j.message || text || `HTTP ${status}`);
}

async function call(service, method, body) {
  const r = await fetch(`../xce.v1.${service}/${method}`, {
    method: 'POST', headers: headers('application/json'), body: JSON.stringify(body || {}),
    cache: 'no-store', signal: state.stop.signal,
  });
  const text = await r.text();
  if (!r.ok) throw rpcError(r.status, text);
  return text ? JSON.parse(text) : {};
}

// stream calls a server-streaming method and calls onMessage with each
// message until the stream ends (an RPCError) or signal aborts.
async function stream(service, method, body, onMessage, signal) {
  const payload = new TextEncoder().encode(JSON.stringify(body || {}));
  const frame = new Uint8Array(5 + payload.length);
  new DataView(frame.buffer).setUint32(1, payload.length);
  frame.set(payload, 5);
  const r = await fetch(`../xce.v1.${service}/${method}`, {
    method: 'POST', headers: headers('application/connect+json'), body: frame, cache: 'no-store', signal,
  });
  if (!r.ok) throw rpcError(r.status, await r.text());
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = new Uint8Array(0);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new RPCError('unavailable', 'the stream ended');
    const joined = new Uint8Array(buf.length + value.length);
    joined.set(buf);
    joined.set(value, buf.length);
    buf = joined;
    while (buf.length >= 5) {
      const n = new DataView(buf.buffer, buf.byteOffset).getUint32(1);
      if (buf.length < 5 + n) break;
      const flags = buf[0];
      const msg = JSON.parse(dec.decode(buf.subarray(5, 5 + n)) || '{}');
      buf = buf.slice(5 + n);
      if (flags & 2) {
        if (msg.error) throw new RPCError(msg.error.code, msg.error.message);
        throw new RPCError('unavailable', 'the stream ended');
      }
      onMessage(msg);
    }
  }
}

const may = (perm) => !!state.who && state.who.permissions.includes(perm);
const isPrimary = () => state.status && roleName(state.status.role) === 'PRIMARY';
const readConsistency = () => (isPrimary() ? 'CONSISTENCY_LINEARIZABLE' : STALE);

// ---- identity ------------------------------------------------------------

async function identify() {
  const h = state.token ? { Authorization: `Bearer ${state.token}` } : {};
  let r;
  try {
    r = await fetch('whoami', { headers: h, cache: 'no-store' });
  } catch (e) {
    setConn('lost', `cannot reach this node: ${e.message}`);
    await sleep(1000);
    return identify();
  }
  const j = await r.json().catch(() => ({}));
  if (r.status === 401) {
    showLogin(state.token ? `Not signed in: ${j.error || 'the token was refused'}` : '');
    return;
  }
  state.who = j;
  renderWho();
  if (!may('status') || !may('read')) {
    showLogin(`${j.name} (${j.via}) may not read the cluster: it needs the status, cluster and read permissions.`);
    return;
  }
  $('login').hidden = true;
  document.body.classList.add('signed-in');
  start();
}

function showLogin(message) {
  $('login').hidden = false;
  for (const p of document.querySelectorAll('[role="tabpanel"]')) p.hidden = true;
  $('tabs').hidden = true;
  $('login-error').textContent = message || '';
  setConn('', 'not signed in');
  $('token').focus();
}

function renderWho() {
  const who = state.who;
  const parts = [];
  if (who.auth) {
    parts.push(el('span', { class: 'muted', text: `${who.name} (${who.via})` }));
    if (state.token) {
      parts.push(el('button', {
        type: 'button', text: 'Sign out',
        onclick: () => { sessionStorage.removeItem('xce.token'); location.reload(); },
      }));
    }
  } else {
    parts.push(el('span', { class: 'muted', text: 'permissions off' }));
  }
  fill($('who'), ...parts);
}

// ---- status: WatchStatus --------------------------------------------------

function setConn(cls, text) {
  const c = $('conn');
  c.className = `conn ${cls}`;
  c.textContent = text;
}

async function statusLoop() {
  let backoff = 250;
  for (;;) {
    try {
      await stream('ControllerService', 'WatchStatus', {}, (st) => {
        backoff = 250;
        setConn('live', 'live');
        onStatus(st);
      }, state.stop.signal);
    } catch (e) {
      if (state.stop.signal.aborted) return;
      if (e.code === 'unauthenticated') { showLogin(`Signed out: ${e.message}`); return; }
      setConn('lost', `connection lost (${e.message}); reconnecting`);
    }
    await sleep(backoff);
    backoff = Math.min(backoff * 2, 2000);
  }
}

function onStatus(st) {
  const prev = state.status;
  state.status = st;
  const role = roleName(st.role);
  if (!prev || prev.leaderId !== st.leaderId || prev.term !== st.term) {
    state.leaders.unshift({ at: new Date(), term: num(st.term), leader: st.leaderId || '' });
    state.leaders.length = Math.min(state.leaders.length, 50);
    activity('role', st.leaderId ? `term ${num(st.term)}: ${st.leaderId} is PRIMARY` : `term ${num(st.term)}: no PRIMARY (electing)`);
  }
  if (prev && roleName(prev.role) !== role) activity('role', `${st.nodeId} became ${role}: ${st.reason || ''}`);
  if (prev && num(prev.kafkaEpoch) !== num(st.kafkaEpoch) && num(st.kafkaEpoch) > 0) {
    activity('fence', `Kafka fence epoch ${num(st.kafkaEpoch)} (publisher ${st.kafkaState || ''})`);
  }
  if (prev && !!prev.placementFrozen !== !!st.placementFrozen) {
    activity('freeze', st.placementFrozen ? 'placement frozen' : 'placement unfrozen');
  }
  renderStatus();
  if (!prev || prev.leaderId !== st.leaderId || roleName(prev.role) !== role) {
    refreshMembers();
    refreshWorkers();
  }
  if (state.watchGen === null) {
    state.watchGen = num(st.assignmentGeneration);
    assignmentLoop();
  }
}

// refreshStatus reads what WatchStatus sends only when the node's role
// changes: indexes, task count, the freeze, the outbox.
async function refreshStatus() {
  try {
    onStatus(await call('ControllerService', 'Status', {}));
  } catch (_) {
    // The status stream reports a lost connection.
  }
}

function renderStatus() {
  const st = state.status;
  const role = roleName(st.role);
  $('cluster-id').textContent = st.clusterId || '';
  $('node-line').textContent = `node ${st.nodeId} · ${role} · term ${num(st.term)} · ${st.version || ''}`;
  fill($('primary-line'), st.leaderId
    ? el('span', {}, 'PRIMARY: ', el('span', { id: 'primary-id', text: st.leaderId }))
    : el('span', { id: 'primary-id', class: 'badge electing', text: 'no PRIMARY: electing' }));
  document.title = `xce ${st.clusterId || ''} · ${st.leaderId ? `PRIMARY ${st.leaderId}` : 'electing'}`;

  const banner = $('banner');
  if (role === 'PRIMARY') {
    banner.hidden = true;
  } else {
    banner.hidden = false;
    const link = st.leaderAddr ? el('a', { href: `${location.protocol}//${st.leaderAddr}/ui/${location.hash}`, text: `open the PRIMARY's console (${st.leaderId})` }) : null;
    if (role === 'STANDBY') {
      fill(banner, `This node (${st.nodeId}) is a STANDBY: what it shows may trail the PRIMARY by a moment. `, link);
    } else {
      fill(banner, `This node (${st.nodeId}) is ${role}: ${st.reason || 'no PRIMARY is known yet'}. `, link);
    }
  }

  const facts = [
    ['Node', `${st.nodeId} (${role})`],
    ['PRIMARY', st.leaderId || 'none'],
    ['Term', num(st.term)],
    ['Write quorum', st.writeQuorum ? 'yes' : 'no'],
    ['Commit / applied', `${num(st.commitIndex)} / ${num(st.appliedIndex)}`],
    ['Tasks', num(st.tasks).toLocaleString()],
    ['Assignment generation', num(st.assignmentGeneration)],
    ['Placement', st.placementFrozen ? 'frozen' : 'balancing'],
    ['Storage', state.storage || '…'],
    ['Outbox', `${st.kafkaState || 'disabled'}, lag ${num(st.outboxLag)}`],
    ['Kafka epoch', num(st.kafkaEpoch)],
    ['Backend', st.backend || ''],
    ['Auth', st.auth || 'off'],
    ['Uptime', ago(st.uptimeMs)],
  ];
  fill($('cluster-facts'), ...facts.map(([k, v]) => el('div', {}, el('dt', { text: k }), el('dd', { text: v }))));

  const actions = $('cluster-actions');
  actions.hidden = !(may('drain') || may('members'));
  $('freeze').hidden = !may('drain');
  $('freeze').textContent = st.placementFrozen ? 'Unfreeze placement' : 'Freeze placement';
  $('transfer').hidden = !may('members') || role !== 'PRIMARY';

  fill($('leader-history'), ...state.leaders.map((l) => el('li', {},
    el('time', { text: clock(l.at) }), `term ${l.term}: `, l.leader ? `${l.leader} PRIMARY` : 'no PRIMARY')));
}

// ---- members ---------------------------------------------------------------

async function refreshMembers() {
  try {
    const r = await call('ClusterService', 'ListMembers', { consistency: STALE });
    state.members = r.members || [];
    $('members-note').textContent = isPrimary() ? '' : 'Health and lag are as the PRIMARY sees them; a STANDBY does not track them.';
  } catch (e) {
    $('members-note').textContent = `Members: ${e.message}`;
  }
  renderMembers();
  refreshStorage();
}

function renderMembers() {
  fill($('members-body'), ...state.members.map((m) => {
    const primary = m.id === (state.status && state.status.leaderId);
    const addr = m.clientAddr ? el('a', { href: `${location.protocol}//${m.clientAddr}/ui/`, text: m.clientAddr }) : '';
    return el('tr', {},
      el('th', { scope: 'row', text: m.id }),
      el('td', {}, el('span', { class: `badge ${primary ? 'primary' : 'standby'}`, text: primary ? 'PRIMARY' : 'STANDBY' })),
      el('td', { text: m.voter ? 'voter' : 'non-voter' }),
      el('td', {}, primary ? 'leads' : (isPrimary() ? el('span', { class: m.healthy ? '' : 'badge bad', text: m.healthy ? 'healthy' : 'unhealthy' }) : '—')),
      el('td', { class: 'num', text: isPrimary() && !primary ? ago(m.lastContactMs) : '—' }),
      el('td', { class: 'num', text: isPrimary() && !primary ? num(m.lag) : '—' }),
      el('td', {}, addr));
  }));
}

async function refreshStorage() {
  try {
    const r = await fetch('../metrics', { headers: state.token ? { Authorization: `Bearer ${state.token}` } : {}, cache: 'no-store' });
    if (!r.ok) throw new Error(`metrics: HTTP ${r.status}`);
    const text = await r.text();
    const m = text.match(/^xce_storage_healthy (\S+)$/m);
    state.storage = m ? (m[1] === '1' ? 'healthy' : 'writes failing') : 'unknown';
  } catch (e) {
    state.storage = 'unknown';
  }
  if (state.status) renderStatus();
}

// ---- workers -----------------------------------------------------------------

async function refreshWorkers() {
  const note = $('workers-note');
  try {
    const r = await call('ControllerService', 'ListWorkers', {});
    state.workers = r;
    note.textContent = r.settling ? 'The PRIMARY is settling: workers are still registering after a failover.' : '';
    if (!r.settling) {
      // A new PRIMARY's sessions fill as workers find it: compare only
      // lists of a settled PRIMARY.
      noteDrains(state.settledWorkers, r);
      state.settledWorkers = r;
    }
  } catch (e) {
    state.workers = null;
    if (e.code === 'unavailable' || e.code === 'failed_precondition') {
      fill(note, "Workers' sessions are kept by the PRIMARY. ",
        state.status && state.status.leaderAddr ? el('a', { href: `${location.protocol}//${state.status.leaderAddr}/ui/#workers`, text: "Open the PRIMARY's console" }) : '');
    } else {
      note.textContent = `Workers: ${e.message}`;
    }
  }
  renderWorkers();
  renderTasks();
}

function noteDrains(before, now) {
  if (!before) return;
  const was = new Map((before.workers || []).map((w) => [w.workerId, w.drainState || '']));
  for (const w of now.workers || []) {
    if (!was.has(w.workerId)) activity('worker', `${w.workerId} registered`);
    else if ((w.drainState || '') !== was.get(w.workerId)) activity('drain', `${w.workerId}: ${w.drainState || 'undrained'}`);
    was.delete(w.workerId);
  }
  for (const id of was.keys()) activity('worker', `${id} left`);
}

function lagOf(task, worker) {
  const w = state.workers && (state.workers.workers || []).find((x) => x.workerId === worker);
  return w && w.lags && w.lags[task] !== undefined ? num(w.lags[task]) : null;
}

function renderWorkers() {
  const ws = (state.workers && state.workers.workers) || [];
  fill($('workers-body'), ...ws.map((w) => {
    const copies = el('ul', { class: 'copies' });
    const add = (kind, ids) => {
      if (!ids || !ids.length) return;
      const shown = ids.slice(0, 8).map((t) => {
        const lag = w.lags && w.lags[t] !== undefined ? ` (${num(w.lags[t])})` : '';
        return `${t}${lag}`;
      }).join(', ');
      copies.append(el('li', {}, el('span', { class: 'kind', text: `${ids.length} ${kind}` }), shown + (ids.length > 8 ? ', …' : '')));
    };
    add('active', w.actives);
    add('standby', w.standbys);
    add('warm-up', w.warmups);
    const labels = Object.entries(w.labels || {}).map(([k, v]) => el('span', { class: 'label', text: `${k}=${v}` }));
    const drain = w.drainState || '';
    let action = null;
    if (may('drain')) {
      action = drain
        ? el('button', { type: 'button', text: 'Undrain', 'aria-label': `Undrain ${w.workerId}`, onclick: () => act(`Undrain ${w.workerId}? The assignor may place copies on it again.`, () => call('ControllerService', 'UndrainWorker', { workerId: w.workerId })) })
        : el('button', { type: 'button', text: 'Drain', 'aria-label': `Drain ${w.workerId}`, onclick: () => act(`Drain ${w.workerId}? Its copies are handed over to other workers.`, () => call('ControllerService', 'DrainWorker', { workerId: w.workerId })) });
    }
    return el('tr', { 'data-worker': w.workerId },
      el('th', { scope: 'row' }, w.workerId, w.clientAddr ? el('div', { class: 'muted', text: w.clientAddr }) : null),
      el('td', {}, ...labels),
      el('td', { class: 'num', text: num(w.capacity) }),
      el('td', { class: 'num', text: `heartbeat ${ago(w.lastHeartbeatAgeMs)} ago` }),
      el('td', {}, drain ? el('span', { class: 'badge draining', text: drain }) : '—'),
      el('td', {}, copies),
      el('td', {}, action));
  }));
  const away = (state.workers && state.workers.away) || [];
  fill($('away-list'), ...(away.length ? away.map((a) => el('li', {},
    `${a.workerId}: copies replaced in ${ago(a.replacedInMs)}`,
    a.standbys && a.standbys.length ? ` (keeps ${a.standbys.length} standbys)` : '')) : [el('li', { class: 'muted', text: 'none' })]));
}

// ---- tasks -------------------------------------------------------------------

async function loadTasks() {
  const t = state.tasks;
  try {
    const r = await call('ControllerService', 'ListTasks', {
      consistency: readConsistency(), pageSize: PAGE_SIZE, pageToken: t.tokens[t.page], prefix: t.prefix, withPlacements: true,
    });
    t.rows = r.tasks || [];
    t.next = r.nextPageToken || '';
    t.placements = new Map((r.placements || []).map((p) => [p.taskId, p]));
    $('tasks-note').textContent = `page ${t.page + 1}${t.prefix ? ` of tasks starting with “${t.prefix}”` : ''} · ${t.rows.length} shown`;
  } catch (e) {
    $('tasks-note').textContent = `Tasks: ${e.message}`;
  }
  renderTasks();
}

function renderTasks() {
  const t = state.tasks;
  fill($('tasks-body'), ...t.rows.map((task) => {
    const p = t.placements.get(task.taskId) || {};
    const open = () => showTask(task.taskId);
    return el('tr', {
      tabindex: 0, 'data-task': task.taskId, 'aria-label': `Task ${task.taskId}`,
      onclick: open, onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); open(); } },
    },
    el('th', { scope: 'row', text: task.taskId }),
    el('td', { text: task.state || (p.active ? 'running' : 'waiting') }),
    el('td', { class: 'active', text: p.active || '—' }),
    el('td', { text: (p.standbys || []).join(', ') || '—' }),
    el('td', { text: (p.warmups || []).join(', ') || '—' }),
    el('td', { class: 'num', text: num(p.epoch) }),
    el('td', { class: 'num', text: num(task.weight) || 1 }));
  }));
  $('tasks-prev').disabled = t.page === 0;
  $('tasks-next').disabled = !t.next;
}

async function showTask(id) {
  state.detail = id;
  const box = $('task-detail');
  box.hidden = false;
  $('task-detail-h').textContent = `Task ${id}`;
  let r;
  try {
    r = await call('ControllerService', 'GetTask', { taskId: id, consistency: readConsistency(), withMoves: true });
  } catch (e) {
    fill($('task-facts'), el('div', {}, el('dt', { text: 'Error' }), el('dd', { text: e.message })));
    fill($('task-moves'));
    return;
  }
  const task = r.task || {};
  const p = r.placement || {};
  const withLag = (w) => {
    const lag = lagOf(id, w);
    return lag === null ? w : `${w} (lag ${lag})`;
  };
  const facts = [
    ['State', task.state || ''],
    ['Why it waits', task.pendingReason || '—'],
    ['Active', p.active ? withLag(p.active) : 'none'],
    ['Standbys', (p.standbys || []).map(withLag).join(', ') || 'none'],
    ['Warm-ups', (p.warmups || []).map(withLag).join(', ') || 'none'],
    ['Epoch', num(p.epoch)],
    ['Stateful', !task.stateful ? 'no' : num(task.standbyReplicas) ? `yes, ${num(task.standbyReplicas)} standbys wanted` : 'yes'],
    ['Weight', num(task.weight) || 1],
  ];
  fill($('task-facts'), ...facts.map(([k, v]) => el('div', {}, el('dt', { text: k }), el('dd', { text: v }))));
  const moves = r.moves || [];
  let prevActive = '';
  const items = moves.map((m) => {
    const at = new Date(num(m.appliedAtUnixNano) / 1e6);
    const pl = m.placement;
    let text;
    if (!pl) {
      text = 'placement removed (the task was deleted, or no worker could hold it)';
    } else {
      text = `active ${pl.active || 'none'}, epoch ${num(pl.epoch)}` +
        (pl.standbys && pl.standbys.length ? `, standbys ${pl.standbys.join(', ')}` : '') +
        (pl.warmups && pl.warmups.length ? `, warming up on ${pl.warmups.join(', ')}` : '');
      text += ` — ${why(prevActive, pl)}`;
      prevActive = pl.active || '';
    }
    return el('li', {}, el('time', { text: clock(at) }), `generation ${num(m.generation)}: ${text}`);
  }).reverse();
  fill($('task-moves'), ...(items.length ? items : [el('li', { class: 'muted', text: 'no move in the generations this node keeps' })]));
}

// why says what most likely moved a task from prevActive to p, from what the
// console knows of the workers now.
function why(prevActive, p) {
  if (!p.active) return 'no worker holds it';
  if (!prevActive) return 'placed';
  if (prevActive === p.active) return 'copies changed';
  const ws = (state.workers && state.workers.workers) || [];
  const prev = ws.find((w) => w.workerId === prevActive);
  if (!prev) return `${prevActive} is gone (left, or its session expired)`;
  if (prev.drainState) return `${prevActive} is draining`;
  return 'balance';
}

// ---- the assignment, live: WatchAssignment ----------------------------------

async function assignmentLoop() {
  let backoff = 250;
  for (;;) {
    const ctrl = new AbortController();
    const stopAll = () => ctrl.abort();
    state.stop.signal.addEventListener('abort', stopAll);
    let pending = null;
    try {
      await stream('ControllerService', 'WatchAssignment', { fromGeneration: state.watchGen, consistency: STALE }, (m) => {
        backoff = 250;
        if (m.full) {
          // The node no longer had our generation: take the new one as the
          // start, without holding a copy of the whole assignment.
          state.watchGen = num(m.generation);
          ctrl.abort();
          loadTasks();
          return;
        }
        if (!pending) pending = { generation: num(m.generation), tasks: [], removed: [] };
        pending.tasks.push(...(m.tasks || []));
        pending.removed.push(...(m.removed || []));
        if (!m.more) {
          onGeneration(pending);
          pending = null;
        }
      }, ctrl.signal);
    } catch (e) {
      if (state.stop.signal.aborted) return;
      if (e.code === 'unauthenticated') return;
    } finally {
      state.stop.signal.removeEventListener('abort', stopAll);
    }
    await sleep(backoff);
    backoff = Math.min(backoff * 2, 2000);
  }
}

function onGeneration(g) {
  state.watchGen = g.generation;
  const t = state.tasks;
  const changed = [];
  for (const p of g.tasks) {
    const before = t.placements.get(p.taskId);
    if (t.rows.some((r) => r.taskId === p.taskId)) {
      t.placements.set(p.taskId, p);
      changed.push(p.taskId);
    }
    if (g.tasks.length <= 10 && (!before || before.active !== p.active)) {
      const from = before && before.active ? ` from ${before.active}` : '';
      activity('move', p.active ? `${p.taskId}: active on ${p.active}${from} (epoch ${num(p.epoch)})` : `${p.taskId}: no active`);
    }
  }
  for (const id of g.removed) {
    if (t.placements.delete(id)) changed.push(id);
  }
  if (g.tasks.length > 10) {
    activity('move', `generation ${g.generation}: ${g.tasks.length} tasks placed or moved, ${g.removed.length} removed`);
  }
  if (changed.length) {
    renderTasks();
    for (const id of changed) {
      const row = document.querySelector(`tr[data-task="${CSS.escape(id)}"]`);
      if (row) {
        row.classList.add('flash');
        setTimeout(() => row.classList.remove('flash'), 1500);
      }
    }
    if (changed.includes(state.detail)) showTask(state.detail);
  }
  if (state.status) {
    state.status.assignmentGeneration = g.generation;
  }
  scheduleWorkers();
}

let workersTimer = null;
function scheduleWorkers() {
  if (workersTimer) return;
  workersTimer = setTimeout(() => { workersTimer = null; refreshWorkers(); }, 300);
}

// ---- activity ----------------------------------------------------------------

const activities = [];
function activity(kind, text) {
  activities.unshift({ at: new Date(), kind, text });
  activities.length = Math.min(activities.length, ACTIVITY_MAX);
  fill($('activity-list'), ...activities.map((a) => el('li', {},
    el('time', { text: clock(a.at) }), el('span', { class: 'kind', text: a.kind }), a.text)));
}

// ---- actions -----------------------------------------------------------------

function act(question, run) {
  const d = $('confirm');
  $('confirm-text').textContent = question;
  const ok = $('confirm-ok');
  const cancel = $('confirm-cancel');
  const done = () => {
    ok.onclick = null;
    cancel.onclick = null;
    d.close();
  };
  cancel.onclick = done;
  ok.onclick = async () => {
    done();
    try {
      await run();
      activity('action', question.replace(/\?.*$/, ': done'));
    } catch (e) {
      activity('action', `${question.replace(/\?.*$/, '')}: refused: ${e.message}`);
    }
    refreshWorkers();
    refreshStatus();
  };
  d.showModal();
  cancel.focus();
}

// ---- navigation ----------------------------------------------------------------

function tabs() {
  return [...document.querySelectorAll('[role="tab"]')];
}

function selectTab(name, focus) {
  for (const t of tabs()) {
    const on = t.dataset.panel === name;
    t.setAttribute('aria-selected', on ? 'true' : 'false');
    t.tabIndex = on ? 0 : -1;
    $(t.dataset.panel).hidden = !on;
    if (on && focus) t.focus();
  }
  if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
}

function setup() {
  for (const t of tabs()) {
    t.addEventListener('click', () => selectTab(t.dataset.panel, true));
    t.addEventListener('keydown', (e) => {
      const all = tabs();
      const i = all.indexOf(t);
      let j = null;
      if (e.key === 'ArrowRight') j = (i + 1) % all.length;
      if (e.key === 'ArrowLeft') j = (i - 1 + all.length) % all.length;
      if (e.key === 'Home') j = 0;
      if (e.key === 'End') j = all.length - 1;
      if (j !== null) {
        e.preventDefault();
        selectTab(all[j].dataset.panel, true);
      }
    });
  }
  $('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    state.token = $('token').value.trim();
    sessionStorage.setItem('xce.token', state.token);
    $('token').value = '';
    identify();
  });
  $('task-search').addEventListener('submit', (e) => {
    e.preventDefault();
    const prefix = $('task-prefix').value.trim();
    if (!/^[A-Za-z0-9._-]*$/.test(prefix)) {
      $('tasks-note').textContent = 'A task id has only letters, digits, ".", "_" and "-".';
      return;
    }
    Object.assign(state.tasks, { prefix, tokens: [''], page: 0 });
    loadTasks();
  });
  $('tasks-next').addEventListener('click', () => {
    const t = state.tasks;
    if (!t.next) return;
    t.tokens[t.page + 1] = t.next;
    t.page++;
    loadTasks();
  });
  $('tasks-prev').addEventListener('click', () => {
    const t = state.tasks;
    if (t.page === 0) return;
    t.page--;
    loadTasks();
  });
  $('freeze').addEventListener('click', () => {
    const frozen = state.status && state.status.placementFrozen;
    act(frozen ? 'Unfreeze the placement? The assignor balances again.' : 'Freeze the placement? Only failures are handled until it is unfrozen.',
      () => call('ControllerService', frozen ? 'UnfreezePlacement' : 'FreezePlacement', {}));
  });
  $('transfer').addEventListener('click', () => {
    act('Hand leadership on to another voter? Writes pause for the handover.', () => call('ClusterService', 'TransferLeader', {}));
  });
}

let started = false;
function start() {
  $('tabs').hidden = false;
  const name = (location.hash || '#cluster').slice(1);
  selectTab(['cluster', 'workers', 'tasks', 'activity'].includes(name) ? name : 'cluster', false);
  if (started) return;
  started = true;
  statusLoop();
  loadTasks();
  setInterval(() => { refreshStatus(); refreshMembers(); refreshWorkers(); }, POLL_MS);
}

setup();
identify();
