// Trident management UI: one page, plain JavaScript, no dependencies.
// It speaks RabbitMQ's management API (/api/...) with HTTP basic
// credentials, or an OAuth 2 access token (Bearer), kept in
// sessionStorage, as RabbitMQ's own UI does.
'use strict';
(() => {
  const AUTH_KEY = 'trident.auth';
  const USER_KEY = 'trident.user';
  const PREFS_KEY = 'trident.prefs';
  const OAUTH_KEY = 'trident.oauth'; // PKCE verifier and state during an OAuth 2 login
  const HISTORY_SECONDS = 600;

  // ---------------------------------------------------------------- DOM
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v == null || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = v;
        else if (k === 'style') el.style.cssText = v;
        else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
        else if (k === 'value') el.value = v;
        else if (k === 'checked' || k === 'selected' || k === 'disabled') { el[k] = !!v; if (v) el.setAttribute(k, ''); }
        else el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    add(el, kids);
    return el;
  }
  function add(el, kids) {
    for (const k of kids) {
      if (k == null || k === false) continue;
      if (Array.isArray(k)) add(el, k);
      else if (k instanceof Node) el.appendChild(k);
      else el.appendChild(document.createTextNode(String(k)));
    }
    return el;
  }
  function fill(el, ...kids) {
    el.replaceChildren();
    return add(el, kids);
  }
  const $ = (sel, root) => (root || document).querySelector(sel);

  // --------------------------------------------------------- formatting
  const nf = new Intl.NumberFormat('en-US');
  function num(v) { return v == null || v === '' ? '' : (typeof v === 'number' ? nf.format(v) : String(v)); }
  function rate(v) {
    if (v == null) return '';
    if (v === 0) return '0/s';
    if (v < 10) return v.toFixed(1) + '/s';
    return nf.format(Math.round(v)) + '/s';
  }
  function compact(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return +(v / 1e9).toFixed(1) + 'G';
    if (a >= 1e6) return +(v / 1e6).toFixed(1) + 'M';
    if (a >= 1e3) return +(v / 1e3).toFixed(1) + 'k';
    if (a > 0 && a < 10 && v % 1 !== 0) return String(+v.toFixed(2));
    return String(Math.round(v));
  }
  function bytes(v) {
    if (v == null || v === '' || isNaN(v)) return '';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    v = Number(v);
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i === 0 ? Math.round(v) : v.toFixed(v < 10 ? 1 : 0)) + ' ' + u[i];
  }
  function duration(ms) {
    if (ms == null) return '';
    let s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400); s -= d * 86400;
    const hh = Math.floor(s / 3600); s -= hh * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) return `${d}d ${hh}h`;
    if (hh) return `${hh}h ${m}m`;
    if (m) return `${m}m ${s}s`;
    return `${s}s`;
  }
  function when(ms) {
    if (!ms) return '';
    const d = new Date(typeof ms === 'number' ? ms : Date.parse(ms));
    if (isNaN(d)) return String(ms);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  function ago(ms) {
    const t = typeof ms === 'number' ? ms : Date.parse(ms);
    if (isNaN(t)) return String(ms);
    return duration(Math.max(0, Date.now() - t)) + ' ago';
  }
  function get(o, path) {
    let v = o;
    for (const k of path.split('.')) { if (v == null) return undefined; v = v[k]; }
    return v;
  }
  const rateOf = (o, stat) => get(o, `message_stats.${stat}_details.rate`);
  function jsonText(v) {
    if (v == null) return '';
    if (typeof v === 'string') return v;
    return JSON.stringify(v);
  }
  function isEmptyObj(v) { return v == null || (Array.isArray(v) ? v.length === 0 : typeof v === 'object' && Object.keys(v).length === 0); }
  function argsView(args) {
    if (isEmptyObj(args)) return h('span', { class: 'muted' }, '—');
    return h('span', { class: 'mono' }, Object.entries(args).map(([k, v], i) => [i ? ', ' : '', `${k}=${jsonText(v)}`]));
  }
  const vhostLabel = (v) => v;
  const enc = encodeURIComponent;
  // The default exchange has the empty name; RabbitMQ's API and UI call it
  // amq.default in paths.
  const exPath = (name) => enc(name === '' ? 'amq.default' : name);
  const exLabel = (name) => (name === '' ? '(AMQP default)' : name);

  // Parses "key = value" lines into an object; values that read as JSON
  // (numbers, booleans, objects, quoted strings) keep their type.
  function parseKV(text) {
    const out = {};
    for (const raw of String(text || '').split('\n')) {
      const line = raw.trim();
      if (!line || line.startsWith('#')) continue;
      const i = line.indexOf('=');
      if (i <= 0) throw new Error(`"${line}" is not key = value`);
      const key = line.slice(0, i).trim();
      const sv = line.slice(i + 1).trim();
      let v = sv;
      if (/^(-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|null|\{.*\}|\[.*\]|".*")$/.test(sv)) {
        try { v = JSON.parse(sv); } catch (_) { v = sv; }
      }
      out[key] = v;
    }
    return out;
  }

  // ---------------------------------------------------------------- prefs
  const prefs = Object.assign({ vhost: '', refresh: 5, lists: {} }, JSON.parse(localStorage.getItem(PREFS_KEY) || '{}'));
  function savePrefs() { localStorage.setItem(PREFS_KEY, JSON.stringify(prefs)); }

  // ------------------------------------------------------------------ API
  class ApiError extends Error {
    constructor(status, error, reason) {
      super(reason ? `${error}: ${reason}` : error);
      this.status = status; this.error = error; this.reason = reason;
    }
    describe() {
      if (this.status === 0) return this.message;
      const what = this.reason && this.reason !== this.error ? `${this.error} — ${this.reason}` : this.error;
      return `${this.status}: ${what}`;
    }
  }
  function b64(s) { return btoa(String.fromCharCode(...new TextEncoder().encode(s))); }
  // The Authorization header value: "Basic ..." or "Bearer ...".
  function authHeader() {
    const v = sessionStorage.getItem(AUTH_KEY);
    return v && !/^(Basic|Bearer) /.test(v) ? 'Basic ' + v : v;
  }

  async function api(method, path, body, extraHeaders) {
    const headers = Object.assign({ Accept: 'application/json' }, extraHeaders || {});
    const auth = authHeader();
    if (auth) headers.Authorization = auth;
    let payload;
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      payload = typeof body === 'string' ? body : JSON.stringify(body);
    }
    let res;
    try {
      // credentials: 'omit' keeps the browser from popping up its own
      // basic-auth dialog on a 401; we send the header ourselves.
      res = await fetch('api' + path, { method, headers, body: payload, credentials: 'omit', cache: 'no-store' });
    } catch (e) {
      showBanner('Cannot reach the server. Retrying…');
      throw new ApiError(0, 'network error: ' + e.message);
    }
    showBanner(null);
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (_) { data = text; }
    }
    if (!res.ok) {
      const err = data && typeof data === 'object'
        ? new ApiError(res.status, data.error || res.statusText, data.reason)
        : new ApiError(res.status, res.statusText || 'error', typeof data === 'string' ? data.trim().slice(0, 200) : '');
      if (res.status === 401 && auth && path !== '/whoami' && /login failed|not_authori[sz]ed/i.test((err.reason || '') + ' ' + err.error) && !/not management/i.test(err.reason || '')) {
        // The credentials no longer work (user deleted or password changed).
        const check = await fetch('api/whoami', { headers: { Authorization: auth }, credentials: 'omit' }).catch(() => null);
        if (check && check.status === 401) logout('Your session is no longer valid; please log in again.');
      }
      throw err;
    }
    return data;
  }
  const errText = (e) => (e instanceof ApiError ? e.describe() : (e && e.message) || String(e));

  // ------------------------------------------------------------ feedback
  function toast(kind, msg) {
    const t = h('div', { class: 'toast ' + kind, role: kind === 'error' ? 'alert' : 'status' },
      h('span', null, msg), h('button', { class: 'x', type: 'button', title: 'Dismiss', onclick: () => t.remove() }, '✕'));
    $('#toasts').appendChild(t);
    setTimeout(() => t.remove(), kind === 'error' ? 9000 : 4000);
  }
  function showBanner(msg) {
    const b = $('#banner');
    if (!msg) { b.hidden = true; return; }
    b.textContent = msg; b.hidden = false;
  }
  function alertBox(kind, ...kids) { return h('div', { class: 'alert ' + kind, role: kind === 'error' ? 'alert' : null }, kids); }
  function errorBox(prefix, e) { return alertBox('error', h('b', null, prefix + ' '), errText(e)); }

  // Runs an action from a button or form: disables it, reports errors.
  async function act(btn, fn) {
    if (btn) btn.disabled = true;
    try {
      return await fn();
    } catch (e) {
      toast('error', errText(e));
      return undefined;
    } finally {
      if (btn) btn.disabled = false;
    }
  }

  // ------------------------------------------------------------ widgets
  function panel(title, opts, ...body) {
    opts = opts || {};
    const head = h('div', { class: 'panel-head' }, h('h2', null, title), opts.count || null, opts.right ? h('div', { class: 'right' }, opts.right) : null);
    return h('section', { class: 'panel', id: opts.id || null }, head, h('div', { class: 'panel-body' + (opts.flush ? ' flush' : '') }, body));
  }
  function collapsible(title, id, open, ...body) {
    return h('details', { class: 'panel', id, open }, h('summary', null, title), h('div', { class: 'panel-body' }, body));
  }
  function stat(label, value, opts) {
    opts = opts || {};
    return h('div', { class: 'stat' + (opts.accent ? ' accent' : ''), 'data-stat': opts.key || null },
      h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
  }
  function tag(text, color, title) { return h('span', { class: 'tag ' + (color || ''), title: title || null }, text); }
  function stateView(s) {
    if (!s) return '';
    const cls = s === 'running' || s === 'live' ? '' : (s === 'idle' || s === 'flow' || s === 'starting') ? ' idle' : ' bad';
    return h('span', { class: 'state' + cls }, s);
  }
  function kv(pairs) {
    return h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', null, k), h('dd', null, v === '' || v == null ? h('span', { class: 'muted' }, '—') : v)]));
  }
  // rowAttrs, if given, returns each row's attributes.
  function table(cols, rows, empty, rowAttrs, id) {
    return h('div', { class: 'table-wrap' }, h('table', { class: 'data', id: id || null },
      h('thead', null, h('tr', null, cols.map((c) => h('th', { class: c.num ? 'num' : null }, c.title)))),
      h('tbody', null, rows.length ? rows.map((r) => h('tr', rowAttrs ? rowAttrs(r) : null, cols.map((c) => h('td', { class: c.cls || (c.num ? 'num' : null) }, c.render(r)))))
        : h('tr', null, h('td', { class: 'empty', colspan: cols.length }, empty || 'Nothing here')))));
  }
  function selectEl(attrs, options, value) {
    return h('select', attrs, options.map((o) => {
      const [v, label] = Array.isArray(o) ? o : [o, o];
      return h('option', { value: v, selected: v === value }, label);
    }));
  }
  function bar(used, total, fmt) {
    fmt = fmt || num;
    if (!total) return fmt(used);
    const pct = Math.min(100, (used / total) * 100);
    const color = pct > 85 ? 'var(--danger)' : pct > 60 ? '#e09a1f' : 'var(--ok)';
    return h('div', { style: 'min-width:120px;max-width:280px' },
      h('div', { class: 'small' }, `${fmt(used)} / ${fmt(total)}`),
      h('div', { style: 'height:5px;background:#eef1f6;border-radius:3px;margin-top:3px' },
        h('div', { style: `height:5px;width:${pct.toFixed(1)}%;background:${color};border-radius:3px` })));
  }
  function protocolView(p) {
    const s = String(p || '');
    const web = /web|ws/i.test(s);
    let fam = 'Other', color = '';
    if (/amqp/i.test(s)) { fam = 'AMQP'; color = 'blue'; } else if (/mqtt/i.test(s)) { fam = 'MQTT'; color = 'green'; } else if (/stomp/i.test(s)) { fam = 'STOMP'; color = 'violet'; }
    const ver = (s.match(/(\d[\d.-]*)\s*$/) || [])[1] || '';
    return h('span', { title: s }, tag(fam, color), web ? tag('WebSocket', 'teal') : null, ver ? h('span', { class: 'muted small' }, ' ' + ver) : null);
  }
  function features(o) {
    return h('span', null,
      o.durable ? tag('D', 'blue', 'durable') : tag('T', '', 'transient'),
      o.auto_delete ? tag('AD', 'amber', 'auto-delete') : null,
      o.exclusive ? tag('Excl', 'red', 'exclusive') : null,
      o.internal ? tag('I', 'violet', 'internal') : null,
      argTags(o.arguments),
      o.policy ? tag(o.policy, 'green', 'policy') : null);
  }
  function argTags(args) {
    if (isEmptyObj(args)) return null;
    const short = {
      'x-message-ttl': 'TTL', 'x-expires': 'Exp', 'x-max-length': 'Lim', 'x-max-length-bytes': 'Lim B',
      'x-dead-letter-exchange': 'DLX', 'x-dead-letter-routing-key': 'DLK', 'x-max-priority': 'Pri',
      'x-single-active-consumer': 'SAC', 'x-overflow': 'Ovfl', 'x-queue-mode': 'Mode', 'alternate-exchange': 'AE',
    };
    return Object.keys(args).filter((k) => k !== 'x-queue-type').map((k) => tag(short[k] || 'Args', 'teal', `${k}: ${jsonText(args[k])}`));
  }

  // --------------------------------------------------------------- chart
  // A small canvas line chart over the last HISTORY_SECONDS.
  function lineChart(series, fmt, integer) {
    const canvas = h('canvas', null);
    const legend = h('div', { class: 'legend' });
    const tip = h('div', { class: 'chart-tip', hidden: true });
    const wrap = h('div', { class: 'chart' }, canvas, tip, legend);
    let points = [];
    let hover = null;
    const pad = { l: 46, r: 10, t: 10, b: 22 };

    function draw() {
      const dpr = window.devicePixelRatio || 1;
      const w = canvas.clientWidth, hh = canvas.clientHeight;
      if (!w || !hh) return;
      canvas.width = Math.round(w * dpr); canvas.height = Math.round(hh * dpr);
      const g = canvas.getContext('2d');
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, w, hh);
      const now = Date.now(), t0 = now - HISTORY_SECONDS * 1000;
      const pw = w - pad.l - pad.r, ph = hh - pad.t - pad.b;
      let max = 0;
      for (const p of points) for (const s of series) max = Math.max(max, p.v[s.key] || 0);
      const step = niceStep(max / 4, integer);
      const top = step * 4;
      const x = (t) => pad.l + ((t - t0) / (now - t0)) * pw;
      const y = (v) => pad.t + ph - (v / top) * ph;
      g.font = '11px system-ui, sans-serif';
      g.textBaseline = 'middle';
      g.strokeStyle = '#e9edf3'; g.fillStyle = '#8a94a6'; g.lineWidth = 1;
      for (let i = 0; i <= 4; i++) {
        const v = (top / 4) * i, yy = Math.round(y(v)) + 0.5;
        g.beginPath(); g.moveTo(pad.l, yy); g.lineTo(w - pad.r, yy); g.stroke();
        g.textAlign = 'right'; g.fillText(fmt(v, true), pad.l - 6, yy);
      }
      g.textAlign = 'center'; g.textBaseline = 'top';
      for (let m = 10; m >= 0; m -= 2) {
        const t = now - m * 60000;
        g.fillText(m ? `-${m}m` : 'now', Math.min(x(t), w - pad.r - 12), pad.t + ph + 6);
      }
      const visible = points.filter((p) => p.t >= t0 - 10000);
      for (const s of series) {
        g.strokeStyle = s.color; g.lineWidth = 2; g.lineJoin = 'round';
        g.setLineDash(s.dash ? [5, 4] : []);
        g.beginPath();
        visible.forEach((p, i) => {
          const xx = Math.max(pad.l, x(p.t)), yy = y(p.v[s.key] || 0);
          if (i === 0) g.moveTo(xx, yy); else g.lineTo(xx, yy);
        });
        g.stroke();
        g.setLineDash([]);
        if (s.fill && visible.length > 1) {
          g.lineTo(x(visible[visible.length - 1].t), y(0)); g.lineTo(Math.max(pad.l, x(visible[0].t)), y(0)); g.closePath();
          g.globalAlpha = 0.08; g.fillStyle = s.color; g.fill(); g.globalAlpha = 1;
        }
        if (visible.length === 1) {
          g.fillStyle = s.color; g.beginPath(); g.arc(x(visible[0].t), y(visible[0].v[s.key] || 0), 3, 0, 7); g.fill();
        }
      }
      if (visible.length < 2) {
        g.fillStyle = '#98a2b3'; g.textAlign = 'center'; g.textBaseline = 'middle'; g.font = '13px system-ui, sans-serif';
        g.fillText('Collecting samples…', pad.l + pw / 2, pad.t + ph / 2);
      }
      if (hover && visible.length) {
        let best = visible[0];
        for (const p of visible) if (Math.abs(x(p.t) - hover) < Math.abs(x(best.t) - hover)) best = p;
        const xx = Math.round(x(best.t)) + 0.5;
        g.strokeStyle = '#98a2b3'; g.setLineDash([3, 3]); g.beginPath(); g.moveTo(xx, pad.t); g.lineTo(xx, pad.t + ph); g.stroke(); g.setLineDash([]);
        fill(tip, h('div', { class: 'muted', style: 'color:#cfd5e1' }, when(best.t).slice(11)),
          series.map((s) => h('div', null, h('span', { class: 'sw', style: `background:${s.color}` }), `${s.label}: ${fmt(best.v[s.key] || 0)}`)));
        tip.hidden = false;
        const left = xx + 12 + 170 > w ? xx - 180 : xx + 12;
        tip.style.left = left + 'px'; tip.style.top = pad.t + 'px';
      } else {
        tip.hidden = true;
      }
    }
    function niceStep(v, whole) {
      if (v <= 0) return whole ? 1 : 0.25;
      const p = Math.pow(10, Math.floor(Math.log10(v)));
      let st = 10 * p;
      for (const m of [1, 2, 2.5, 5]) if (m * p >= v) { st = m * p; break; }
      return whole ? Math.max(1, Math.ceil(st)) : st;
    }
    function legendUpdate() {
      const last = points[points.length - 1];
      fill(legend, series.map((s) => h('span', { class: 'item' }, h('span', { class: 'sw', style: `background:${s.color}` }), s.label,
        h('span', { class: 'v' }, last ? fmt(last.v[s.key] || 0) : '—'))));
    }
    canvas.addEventListener('mousemove', (e) => { hover = e.offsetX; draw(); });
    canvas.addEventListener('mouseleave', () => { hover = null; draw(); });
    new ResizeObserver(() => draw()).observe(canvas);
    return {
      el: wrap,
      update(pts) { points = pts; draw(); legendUpdate(); },
    };
  }

  // ------------------------------------------------------ overview sampler
  // The overview is polled on every tick whatever page is shown, so that the
  // charts have a history when the user comes back to them.
  const samples = [];
  let lastOverview = null;
  let seeded = false;
  const RATE_KEYS = ['publish', 'confirm', 'deliver_get', 'ack', 'redeliver'];

  async function sampleOverview() {
    const q = seeded ? '' : `?lengths_age=${HISTORY_SECONDS}&lengths_incr=5&msg_rates_age=${HISTORY_SECONDS}&msg_rates_incr=5`;
    const ov = await api('GET', '/overview' + q);
    lastOverview = ov;
    if (!seeded) { seeded = true; seedHistory(ov); }
    const qt = ov.queue_totals || {};
    const v = {
      ready: qt.messages_ready || 0, unacked: qt.messages_unacknowledged || 0, total: qt.messages || 0,
    };
    for (const k of RATE_KEYS) v[k] = rateOf(ov, k) || 0;
    v.unroutable = (rateOf(ov, 'drop_unroutable') || 0) + (rateOf(ov, 'return_unroutable') || 0);
    const now = Date.now();
    if (samples.length && now - samples[samples.length - 1].t < 1000) samples.pop();
    samples.push({ t: now, v });
    while (samples.length && samples[0].t < now - (HISTORY_SECONDS + 30) * 1000) samples.shift();
    updateFooter(ov);
    return ov;
  }
  // RabbitMQ returns samples (newest first) when asked with *_age params.
  function seedHistory(ov) {
    const byT = new Map();
    const put = (t, k, v) => { if (!byT.has(t)) byT.set(t, {}); byT.get(t)[k] = v; };
    const qt = ov.queue_totals || {};
    for (const [k, f] of [['ready', 'messages_ready'], ['unacked', 'messages_unacknowledged'], ['total', 'messages']]) {
      for (const s of get(qt, f + '_details.samples') || []) put(s.timestamp, k, s.sample);
    }
    for (const k of RATE_KEYS) {
      const ss = get(ov, `message_stats.${k}_details.samples`) || [];
      for (let i = 0; i + 1 < ss.length; i++) {
        const dt = (ss[i].timestamp - ss[i + 1].timestamp) / 1000;
        if (dt > 0) put(ss[i].timestamp, k, Math.max(0, (ss[i].sample - ss[i + 1].sample) / dt));
      }
    }
    const ts = [...byT.keys()].sort((a, b) => a - b);
    const skew = ts.length ? Date.now() - ts[ts.length - 1] : 0; // server clock vs ours
    for (const t of ts) samples.push({ t: t + Math.max(0, skew - 5000), v: byT.get(t) });
  }
  function updateFooter(ov) {
    const f = $('#footer-info');
    if (!f) return;
    const product = ov.product_name || 'Trident';
    fill(f, `${product} ${ov.product_version || ov.rabbitmq_version || ''} · node `, h('b', null, ov.node || ''), ov.cluster_name ? ` · cluster ${ov.cluster_name}` : '');
    $('#last-update').textContent = 'Updated ' + when(Date.now()).slice(11);
  }

  // ----------------------------------------------------------- vhosts
  let vhostNames = [];
  async function loadVhosts() {
    try {
      const vs = await api('GET', '/vhosts');
      vhostNames = (Array.isArray(vs) ? vs : vs.items || []).map((v) => v.name).sort();
    } catch (_) {
      if (!vhostNames.length) vhostNames = ['/'];
    }
    const sel = $('#vhost-select');
    const cur = prefs.vhost;
    fill(sel, h('option', { value: '' }, 'All'), vhostNames.map((n) => h('option', { value: n, selected: n === cur }, vhostLabel(n))));
    if (cur && !vhostNames.includes(cur)) { prefs.vhost = ''; savePrefs(); }
    sel.value = prefs.vhost;
  }
  function vhostSelect(attrs, value) {
    const names = vhostNames.length ? vhostNames : ['/'];
    return selectEl(attrs, names, value || prefs.vhost || (names.includes('/') ? '/' : names[0]));
  }

  // ------------------------------------------------------------ cluster
  // The members as /api/nodes last listed them: one entry when clustering
  // is off. Every tick refreshes it (checkAlarms).
  let clusterNodes = [];
  async function loadNodes() {
    const nodes = await api('GET', '/nodes');
    clusterNodes = Array.isArray(nodes) ? nodes : [];
    return clusterNodes;
  }
  const isCluster = () => clusterNodes.length > 1;
  const localNode = () => (lastOverview && lastOverview.node) || '';
  // Node names without their "@host" when every member shares it
  // ("trident-0@localhost" reads "trident-0"); the full name is the title.
  function nodeLabel(name) {
    const at = String(name || '').indexOf('@');
    if (at <= 0 || !isCluster()) return name || '';
    const host = name.slice(at);
    const hostOf = (n) => { const s = String(n); return s.slice(s.indexOf('@')); };
    return clusterNodes.every((n) => hostOf(n.name) === host) ? name.slice(0, at) : name;
  }
  function nodeRunning(name) {
    const n = clusterNodes.find((x) => x.name === name);
    return n ? n.running !== false : null;
  }
  // A node's name with a dot for its state; lead marks a queue's leader.
  function nodeChip(name, lead) {
    if (!name) return h('span', { class: 'muted', title: 'not known on this node yet' }, 'unknown');
    const up = nodeRunning(name);
    const state = up == null ? '' : up ? ' up' : ' down';
    const title = `${name}${up == null ? '' : up ? ' · running' : ' · not running'}${lead ? ' · leader' : ''}`;
    return h('span', { class: 'node-chip' + state + (lead ? ' lead' : ''), title, 'data-node': name }, nodeLabel(name));
  }
  // A quorum queue's members, its leader first and marked.
  function memberChips(q) {
    const ms = [...(q.members || [])].sort((a, b) => (a === q.leader ? -1 : b === q.leader ? 1 : a.localeCompare(b)));
    if (!ms.length) return h('span', { class: 'muted' }, '—');
    return h('span', { class: 'chips' }, ms.map((m) => nodeChip(m, m === q.leader)));
  }

  // ------------------------------------------------------- paged lists
  // A list backed by one of the API's paged collections (page, page_size,
  // name, use_regex, sort, sort_reverse). If the API answers with a plain
  // array, paging, filtering and sorting are done here instead.
  function pagedList(opts) {
    const st = Object.assign({ page: 1, page_size: 50, name: '', use_regex: false, sort: opts.defaultSort || 'name', sort_reverse: false },
      prefs.lists[opts.key] || {});
    const save = () => { prefs.lists[opts.key] = st; savePrefs(); };
    const filter = h('input', { type: 'search', placeholder: `Filter ${opts.noun}s by name`, value: st.name, 'aria-label': 'Filter by name' });
    const regex = h('input', { type: 'checkbox', checked: st.use_regex });
    const sizeSel = selectEl({ 'aria-label': 'Page size' }, [['20', '20'], ['50', '50'], ['100', '100'], ['500', '500']], String(st.page_size));
    const countEl = h('span', { class: 'muted small' });
    const errEl = h('div');
    const thead = h('tr');
    const tbody = h('tbody');
    const pager = h('div', { class: 'pager' });
    let timer = null;
    filter.addEventListener('input', () => {
      clearTimeout(timer);
      timer = setTimeout(() => { st.name = filter.value; st.page = 1; save(); refresh(); }, 250);
    });
    regex.addEventListener('change', () => { st.use_regex = regex.checked; st.page = 1; save(); refresh(); });
    sizeSel.addEventListener('change', () => { st.page_size = +sizeSel.value; st.page = 1; save(); refresh(); });

    function cols() { return opts.columns().filter(Boolean); }
    function renderHead() {
      fill(thead, cols().map((c) => {
        const sorted = c.sort && c.sort === st.sort;
        const th = h('th', { class: [c.num ? 'num' : '', c.sort ? 'sortable' : '', sorted ? 'sorted' : '', sorted && st.sort_reverse ? 'desc' : ''].join(' ').trim() || null, title: c.sort ? 'Sort' : null }, c.title);
        if (c.sort) {
          th.addEventListener('click', () => {
            if (st.sort === c.sort) st.sort_reverse = !st.sort_reverse; else { st.sort = c.sort; st.sort_reverse = !!c.num; }
            save(); refresh();
          });
        }
        return th;
      }));
    }
    function localPage(items) {
      let xs = items;
      if (st.name) {
        let re = null;
        if (st.use_regex) { try { re = new RegExp(st.name); } catch (e) { throw new ApiError(400, 'bad_request', 'invalid regular expression'); } }
        xs = xs.filter((x) => (re ? re.test(x.name) : String(x.name).toLowerCase().includes(st.name.toLowerCase())));
      }
      if (st.sort) {
        const dir = st.sort_reverse ? -1 : 1;
        xs = [...xs].sort((a, b) => {
          const va = get(a, st.sort), vb = get(b, st.sort);
          if (typeof va === 'number' || typeof vb === 'number') return ((va || 0) - (vb || 0)) * dir;
          return String(va ?? '').localeCompare(String(vb ?? '')) * dir;
        });
      }
      const pageCount = Math.max(1, Math.ceil(xs.length / st.page_size));
      const page = Math.min(st.page, pageCount);
      return {
        items: xs.slice((page - 1) * st.page_size, page * st.page_size), page, page_count: pageCount,
        filtered_count: xs.length, total_count: items.length, item_count: 0, page_size: st.page_size,
      };
    }
    let seq = 0;
    async function refresh() {
      const my = ++seq;
      const q = new URLSearchParams({
        page: st.page, page_size: st.page_size, name: st.name, use_regex: st.use_regex,
        pagination: true, sort: st.sort || '', sort_reverse: st.sort_reverse,
      });
      let res;
      try {
        const data = await api('GET', opts.path() + '?' + q);
        if (my !== seq) return;
        res = Array.isArray(data) ? localPage(data) : data;
        fill(errEl);
      } catch (e) {
        if (my !== seq) return;
        fill(errEl, h('div', { style: 'padding:0 16px' }, errorBox(`Could not load ${opts.noun}s:`, e)));
        return;
      }
      if (res.page_count && st.page > res.page_count) { st.page = res.page_count; save(); refresh(); return; }
      renderHead();
      const cs = cols();
      const items = res.items || [];
      fill(tbody, items.length ? items.map((it) => h('tr', null, cs.map((c) => h('td', { class: c.cls || (c.num ? 'num' : null) }, c.render(it)))))
        : h('tr', null, h('td', { class: 'empty', colspan: cs.length }, st.name ? `No ${opts.noun}s match the filter` : `No ${opts.noun}s`)));
      const total = res.total_count ?? items.length, filtered = res.filtered_count ?? total;
      countEl.textContent = filtered === total ? `${num(total)} ${opts.noun}${total === 1 ? '' : 's'}` : `${num(filtered)} of ${num(total)} ${opts.noun}s`;
      const pages = res.page_count || 1;
      const go = (p) => { st.page = p; save(); refresh(); };
      fill(pager,
        h('span', { class: 'grow' }, items.length ? `Showing ${num((st.page - 1) * st.page_size + 1)}–${num((st.page - 1) * st.page_size + items.length)} of ${num(filtered)}` : ''),
        h('button', { class: 'btn secondary small', type: 'button', disabled: st.page <= 1, onclick: () => go(1) }, '«'),
        h('button', { class: 'btn secondary small', type: 'button', disabled: st.page <= 1, onclick: () => go(st.page - 1) }, '‹ Prev'),
        h('span', null, `Page ${num(res.page || st.page)} of ${num(pages)}`),
        h('button', { class: 'btn secondary small', type: 'button', disabled: st.page >= pages, onclick: () => go(st.page + 1) }, 'Next ›'),
        h('button', { class: 'btn secondary small', type: 'button', disabled: st.page >= pages, onclick: () => go(pages) }, '»'));
    }
    renderHead();
    const el = h('section', { class: 'panel', id: opts.id },
      h('div', { class: 'panel-head' }, h('h2', null, opts.title), countEl, opts.headRight ? h('div', { class: 'right' }, opts.headRight) : null),
      h('div', { class: 'toolbar' }, filter, h('label', { class: 'check small' }, regex, 'Regex'), h('span', { class: 'grow' }),
        h('label', { class: 'small muted' }, 'Page size ', sizeSel)),
      errEl,
      h('div', { class: 'table-wrap' }, h('table', { class: 'data', id: opts.id + '-table' }, h('thead', null, thead), tbody)),
      pager);
    return { el, refresh };
  }
  const vhostPath = (base) => () => (prefs.vhost ? `${base}/${enc(prefs.vhost)}` : base);
  const showVhostCol = () => !prefs.vhost && vhostNames.length !== 1;

  // ------------------------------------------------------------ pages
  function pageHead(title, sub, crumbs, actions) {
    return h('div', null,
      crumbs ? h('div', { class: 'crumbs' }, crumbs) : null,
      h('div', { class: 'page-head' }, h('h1', null, title), sub ? h('span', { class: 'sub' }, sub) : null,
        actions ? h('div', { class: 'actions' }, actions) : null));
  }

  // Overview ----------------------------------------------------------
  function overviewPage() {
    const stats = h('div', { class: 'stats', id: 'overview-stats' });
    const queued = lineChart([
      { key: 'ready', label: 'Ready', color: '#1f4fd1', fill: true },
      { key: 'unacked', label: 'Unacked', color: '#e0831f' },
      { key: 'total', label: 'Total', color: '#7a8699', dash: true },
    ], (v, axis) => (axis ? compact(v) : num(Math.round(v))), true);
    const rates = lineChart([
      { key: 'publish', label: 'Publish', color: '#1f4fd1', fill: true },
      { key: 'confirm', label: 'Confirm', color: '#7c4ddb' },
      { key: 'deliver_get', label: 'Deliver / get', color: '#1d8a4f' },
      { key: 'ack', label: 'Ack', color: '#e0831f' },
      { key: 'redeliver', label: 'Redeliver', color: '#c62f2f' },
      { key: 'unroutable', label: 'Unroutable', color: '#98a2b3' },
    ], (v, axis) => (axis ? compact(v) + '/s' : rate(v)));
    const nodeBox = h('div');
    const listenBox = h('div');
    const el = h('div', null,
      pageHead('Overview', null),
      stats,
      h('div', { class: 'grid two' },
        panel('Queued messages', { id: 'chart-queued', right: h('span', { class: 'muted small' }, 'last 10 minutes') }, queued.el),
        panel('Message rates', { id: 'chart-rates', right: h('span', { class: 'muted small' }, 'last 10 minutes') }, rates.el)),
      h('div', { class: 'spacer' }), h('div', { class: 'spacer' }), h('div', { class: 'spacer' }),
      h('div', { class: 'grid two' }, panel('Node', { id: 'node-info' }, nodeBox), panel('Listeners', { flush: true }, listenBox)));

    async function refresh() {
      const ov = lastOverview;
      if (!ov) return;
      const ot = ov.object_totals || {}, qt = ov.queue_totals || {};
      const link = (href, v) => h('a', { href }, num(v ?? 0));
      fill(stats,
        stat('Connections', link('#/connections', ot.connections), { key: 'connections', accent: true }),
        stat('Channels', link('#/channels', ot.channels), { key: 'channels', accent: true }),
        stat('Exchanges', link('#/exchanges', ot.exchanges), { key: 'exchanges', accent: true }),
        stat('Queues', link('#/queues', ot.queues), { key: 'queues', accent: true }),
        stat('Consumers', num(ot.consumers ?? 0), { key: 'consumers', accent: true }),
        stat('Ready', num(qt.messages_ready ?? 0), { key: 'ready' }),
        stat('Unacked', num(qt.messages_unacknowledged ?? 0), { key: 'unacked' }),
        stat('Publish', rate(rateOf(ov, 'publish') ?? 0), { key: 'publish' }),
        stat('Deliver', rate(rateOf(ov, 'deliver_get') ?? 0), { key: 'deliver' }));
      queued.update(samples);
      rates.update(samples);
      const listeners = ov.listeners || [];
      fill(listenBox, table([
        { title: 'Protocol', render: (l) => h('b', null, l.protocol) },
        { title: 'Bound to', render: (l) => l.ip_address },
        { title: 'Port', num: true, render: (l) => l.port },
        { title: 'Node', render: (l) => h('span', { class: 'muted' }, l.node) },
      ], listeners, 'No listeners reported'));
      let node = null;
      try {
        const nodes = await api('GET', '/nodes');
        node = (nodes || []).find((n) => n.name === ov.node) || (nodes || [])[0] || null;
      } catch (_) { /* the node panel shows what the overview has */ }
      fill(nodeBox, kv([
        ['Node', h('b', null, ov.node || (node && node.name) || '')],
        ['Cluster', isCluster() ? h('span', null, ov.cluster_name, ' ', h('a', { href: '#/nodes', class: 'small' }, `${clusterNodes.filter((n) => n.running !== false).length} of ${clusterNodes.length} nodes running`)) : ov.cluster_name],
        ['Version', `${ov.product_name || 'RabbitMQ'} ${ov.product_version || ov.rabbitmq_version || ''}`],
        ov.erlang_version ? ['Runtime', /^go/.test(ov.erlang_version) ? `Go ${ov.erlang_version.replace(/^go/, '')}` : `Erlang ${ov.erlang_version}`] : null,
        node ? ['Uptime', duration(node.uptime)] : null,
        node && node.mem_used != null ? ['Memory', bar(node.mem_used, node.mem_limit, bytes)] : null,
        node && node.disk_free != null ? ['Disk free', h('span', null, bytes(node.disk_free), node.disk_free_limit ? h('span', { class: 'muted' }, ` (limit ${bytes(node.disk_free_limit)})`) : '')] : null,
        node && node.fd_total ? ['File descriptors', bar(node.fd_used, node.fd_total)] : null,
        node && node.sockets_total ? ['Sockets', bar(node.sockets_used, node.sockets_total)] : null,
        node && node.processors ? ['Cores', num(node.processors)] : null,
      ]));
    }
    return { el, refresh };
  }

  // Connections ---------------------------------------------------------
  function connectionsPage() {
    const list = pagedList({
      key: 'connections', id: 'connections', title: 'Connections', noun: 'connection', path: () => (prefs.vhost ? `/vhosts/${enc(prefs.vhost)}/connections` : '/connections'),
      columns: () => [
        { title: 'Name', sort: 'name', cls: 'name', render: (c) => h('span', { title: c.name }, h('a', { href: `#/connections/${enc(c.name)}` }, c.name), c.client_properties && c.client_properties.connection_name ? h('div', { class: 'muted small' }, c.client_properties.connection_name) : null) },
        { title: 'Protocol', sort: 'protocol', render: (c) => [protocolView(c.protocol), c.ssl ? tag('TLS', 'green') : null] },
        showVhostCol() && { title: 'Vhost', sort: 'vhost', render: (c) => c.vhost },
        { title: 'User', sort: 'user', render: (c) => c.user },
        { title: 'Client', cls: 'clip', render: (c) => clientLabel(c) },
        { title: 'State', sort: 'state', render: (c) => stateView(c.state) },
        { title: 'Channels', sort: 'channels', num: true, render: (c) => num(c.channels) },
        { title: 'From client', sort: 'recv_oct_details.rate', num: true, render: (c) => byteRate(get(c, 'recv_oct_details.rate')) },
        { title: 'To client', sort: 'send_oct_details.rate', num: true, render: (c) => byteRate(get(c, 'send_oct_details.rate')) },
        { title: 'Connected', sort: 'connected_at', render: (c) => h('span', { title: when(c.connected_at) }, c.connected_at ? ago(c.connected_at) : '') },
        { title: '', cls: 'actions', render: (c) => h('button', { class: 'btn danger small', type: 'button', onclick: (e) => closeConn(e.target, c) }, 'Close') },
      ],
    });
    async function closeConn(btn, c) {
      if (!confirm(`Close connection ${c.name}?`)) return;
      await act(btn, async () => {
        await api('DELETE', `/connections/${enc(c.name)}`, undefined, { 'X-Reason': 'Closed via management UI' });
        toast('ok', 'Connection closed');
        list.refresh();
      });
    }
    return { el: h('div', null, pageHead('Connections', 'AMQP, MQTT, STOMP and WebSocket clients'), list.el), refresh: list.refresh };
  }

  // Channels ------------------------------------------------------------
  function channelsPage() {
    const list = pagedList({
      key: 'channels', id: 'channels', title: 'Channels', noun: 'channel', path: () => (prefs.vhost ? `/vhosts/${enc(prefs.vhost)}/channels` : '/channels'),
      columns: () => [
        { title: 'Channel', sort: 'name', cls: 'name', render: (c) => channelLabel(c) },
        showVhostCol() && { title: 'Vhost', sort: 'vhost', render: (c) => c.vhost },
        { title: 'User', sort: 'user', render: (c) => c.user },
        { title: 'Mode', render: (c) => [c.confirm ? tag('C', 'blue', 'confirm mode') : null, c.transactional ? tag('T', 'amber', 'transactional') : null] },
        { title: 'State', sort: 'state', render: (c) => stateView(c.state) },
        { title: 'Prefetch', sort: 'prefetch_count', num: true, render: (c) => num(c.prefetch_count) },
        { title: 'Consumers', sort: 'consumer_count', num: true, render: (c) => num(c.consumer_count) },
        { title: 'Unacked', sort: 'messages_unacknowledged', num: true, render: (c) => num(c.messages_unacknowledged) },
        { title: 'Unconfirmed', sort: 'messages_unconfirmed', num: true, render: (c) => num(c.messages_unconfirmed) },
        { title: 'Publish', sort: 'message_stats.publish_details.rate', num: true, render: (c) => rate(rateOf(c, 'publish')) },
        { title: 'Confirm', sort: 'message_stats.confirm_details.rate', num: true, render: (c) => rate(rateOf(c, 'confirm')) },
        { title: 'Deliver / get', sort: 'message_stats.deliver_get_details.rate', num: true, render: (c) => rate(rateOf(c, 'deliver_get')) },
        { title: 'Redeliver', sort: 'message_stats.redeliver_details.rate', num: true, render: (c) => rate(rateOf(c, 'redeliver')) },
        { title: 'Ack', sort: 'message_stats.ack_details.rate', num: true, render: (c) => rate(rateOf(c, 'ack')) },
      ],
    });
    return { el: h('div', null, pageHead('Channels'), list.el), refresh: list.refresh };
  }

  // Exchanges -------------------------------------------------------------
  const EXCHANGE_TYPES = ['direct', 'fanout', 'topic', 'headers', 'x-delayed-message', 'x-consistent-hash', 'x-modulus-hash'];
  function exchangesPage() {
    const list = pagedList({
      key: 'exchanges', id: 'exchanges', title: 'Exchanges', noun: 'exchange', path: vhostPath('/exchanges'),
      columns: () => [
        showVhostCol() && { title: 'Vhost', sort: 'vhost', render: (x) => x.vhost },
        { title: 'Name', sort: 'name', cls: 'name', render: (x) => h('a', { href: `#/exchanges/${enc(x.vhost)}/${exPath(x.name)}`, title: exLabel(x.name) }, exLabel(x.name)) },
        { title: 'Type', sort: 'type', render: (x) => tag(x.type, 'blue') },
        { title: 'Features', render: (x) => features(x) },
        { title: 'Rate in', sort: 'message_stats.publish_in_details.rate', num: true, render: (x) => rate(rateOf(x, 'publish_in')) },
        { title: 'Rate out', sort: 'message_stats.publish_out_details.rate', num: true, render: (x) => rate(rateOf(x, 'publish_out')) },
        { title: 'Delayed', sort: 'messages_delayed', num: true, render: (x) => (x.messages_delayed != null ? num(x.messages_delayed) : '') },
      ],
    });
    const types = (lastOverview && lastOverview.exchange_types || []).map((t) => t.name);
    const f = {
      vhost: vhostSelect({ id: 'add-exchange-vhost' }),
      name: h('input', { type: 'text', id: 'add-exchange-name', required: true, autocomplete: 'off' }),
      type: selectEl({ id: 'add-exchange-type' }, types.length ? types : EXCHANGE_TYPES, 'direct'),
      durable: selectEl({ id: 'add-exchange-durable' }, [['true', 'Durable'], ['false', 'Transient']], 'true'),
      autoDelete: h('input', { type: 'checkbox', id: 'add-exchange-autodelete' }),
      internal: h('input', { type: 'checkbox', id: 'add-exchange-internal' }),
      args: h('textarea', { id: 'add-exchange-args', rows: 2, placeholder: 'alternate-exchange = my-ae' }),
    };
    const form = h('form', { class: 'form', onsubmit: (e) => { e.preventDefault(); submit(e.submitter); } },
      h('label', null, 'Virtual host'), f.vhost,
      h('label', { for: 'add-exchange-name' }, 'Name'), f.name,
      h('label', null, 'Type'), f.type,
      h('label', null, 'Durability'), f.durable,
      h('label', null, 'Options'), h('div', { class: 'row' }, h('label', { class: 'check' }, f.autoDelete, 'Auto delete'), h('label', { class: 'check' }, f.internal, 'Internal')),
      h('label', null, 'Arguments'), h('div', null, f.args, h('div', { class: 'hint' }, 'One key = value per line. Numbers and booleans keep their type.')),
      h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'add-exchange-submit' }, 'Add exchange')));
    async function submit(btn) {
      await act(btn, async () => {
        const name = f.name.value.trim();
        if (!name) throw new Error('The exchange needs a name');
        const body = { type: f.type.value, durable: f.durable.value === 'true', auto_delete: f.autoDelete.checked, internal: f.internal.checked, arguments: parseKV(f.args.value) };
        await api('PUT', `/exchanges/${enc(f.vhost.value)}/${enc(name)}`, body);
        toast('ok', `Exchange ${name} declared`);
        f.name.value = ''; f.args.value = '';
        list.refresh();
      });
    }
    return { el: h('div', null, pageHead('Exchanges'), list.el, collapsible('Add a new exchange', 'add-exchange', false, form)), refresh: list.refresh };
  }

  // Queues ---------------------------------------------------------------
  function queuesPage() {
    const list = pagedList({
      key: 'queues', id: 'queues', title: 'Queues', noun: 'queue', path: vhostPath('/queues'),
      columns: () => [
        showVhostCol() && { title: 'Vhost', sort: 'vhost', render: (q) => q.vhost },
        { title: 'Name', sort: 'name', cls: 'name', render: (q) => h('a', { href: `#/queues/${enc(q.vhost)}/${enc(q.name)}`, title: q.name }, q.name) },
        { title: 'Type', sort: 'type', render: (q) => tag(q.type || 'classic', q.type === 'quorum' ? 'violet' : q.type === 'stream' ? 'teal' : '') },
        { title: 'Features', render: (q) => features(q) },
        { title: 'State', sort: 'state', render: (q) => stateView(q.state) },
        isCluster() && { title: 'Node', sort: 'node', render: (q) => (q.type === 'quorum' ? memberChips(q) : nodeChip(q.node)) },
        { title: 'Ready', sort: 'messages_ready', num: true, render: (q) => num(q.messages_ready) },
        { title: 'Unacked', sort: 'messages_unacknowledged', num: true, render: (q) => num(q.messages_unacknowledged) },
        { title: 'Total', sort: 'messages', num: true, render: (q) => h('b', null, num(q.messages)) },
        { title: 'Consumers', sort: 'consumers', num: true, render: (q) => num(q.consumers) },
        { title: 'Incoming', sort: 'message_stats.publish_details.rate', num: true, render: (q) => rate(rateOf(q, 'publish')) },
        { title: 'Deliver / get', sort: 'message_stats.deliver_get_details.rate', num: true, render: (q) => rate(rateOf(q, 'deliver_get')) },
        { title: 'Ack', sort: 'message_stats.ack_details.rate', num: true, render: (q) => rate(rateOf(q, 'ack')) },
      ],
    });
    const f = {
      vhost: vhostSelect({ id: 'add-queue-vhost' }),
      type: selectEl({ id: 'add-queue-type' }, [['classic', 'Classic'], ['quorum', 'Quorum'], ['stream', 'Stream']], 'classic'),
      name: h('input', { type: 'text', id: 'add-queue-name', autocomplete: 'off' }),
      durable: selectEl({ id: 'add-queue-durable' }, [['true', 'Durable'], ['false', 'Transient']], 'true'),
      autoDelete: h('input', { type: 'checkbox', id: 'add-queue-autodelete' }),
      args: h('textarea', { id: 'add-queue-args', rows: 3, placeholder: 'x-message-ttl = 60000' }),
    };
    const hint = (k, v) => h('a', { href: '#', onclick: (e) => { e.preventDefault(); f.args.value += (f.args.value && !f.args.value.endsWith('\n') ? '\n' : '') + `${k} = ${v}`; f.args.focus(); } }, k);
    const form = h('form', { class: 'form', id: 'add-queue-form', onsubmit: (e) => { e.preventDefault(); submit(e.submitter); } },
      h('label', null, 'Virtual host'), f.vhost,
      h('label', null, 'Type'), f.type,
      h('label', { for: 'add-queue-name' }, 'Name'), f.name,
      h('label', null, 'Durability'), f.durable,
      h('label', null, 'Options'), h('label', { class: 'check' }, f.autoDelete, 'Auto delete'),
      h('label', null, 'Arguments'), h('div', null, f.args, h('div', { class: 'hint' }, 'Add: ',
        hint('x-message-ttl', 60000), hint('x-expires', 1800000), hint('x-max-length', 10000), hint('x-overflow', 'reject-publish'),
        hint('x-dead-letter-exchange', 'dlx'), hint('x-dead-letter-routing-key', 'dead'), hint('x-max-priority', 10), hint('x-single-active-consumer', true),
        hint('x-max-age', '7D'), hint('x-max-length-bytes', 20000000000), hint('x-stream-max-segment-size-bytes', 500000000))),
      h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'add-queue-submit' }, 'Add queue')));
    f.type.addEventListener('change', () => { if (f.type.value !== 'classic') { f.durable.value = 'true'; f.autoDelete.checked = false; } });
    async function submit(btn) {
      await act(btn, async () => {
        const name = f.name.value.trim();
        if (!name) throw new Error('The queue needs a name');
        const args = parseKV(f.args.value);
        if (f.type.value !== 'classic') args['x-queue-type'] = f.type.value;
        const body = { durable: f.durable.value === 'true', auto_delete: f.autoDelete.checked, arguments: args };
        await api('PUT', `/queues/${enc(f.vhost.value)}/${enc(name)}`, body);
        toast('ok', `Queue ${name} declared`);
        f.name.value = ''; f.args.value = '';
        list.refresh();
      });
    }
    return { el: h('div', null, pageHead('Queues'), list.el, collapsible('Add a new queue', 'add-queue', false, form)), refresh: list.refresh };
  }

  // Publishing (exchange and queue pages) ---------------------------------
  function publishForm(vhost, exchange, fixedKey) {
    const f = {
      key: h('input', { type: 'text', id: 'publish-routing-key', value: fixedKey || '', autocomplete: 'off', readonly: fixedKey != null }),
      mode: selectEl({ id: 'publish-delivery-mode' }, [['1', '1 – Non-persistent'], ['2', '2 – Persistent']], '1'),
      headers: h('textarea', { id: 'publish-headers', rows: 2, placeholder: 'x-trace = 1' }),
      props: h('textarea', { id: 'publish-properties', rows: 2, placeholder: 'content_type = text/plain\ncorrelation_id = abc' }),
      payload: h('textarea', { id: 'publish-payload', rows: 5, placeholder: 'Message body' }),
      encoding: selectEl({ id: 'publish-encoding' }, [['string', 'String'], ['base64', 'Base64']], 'string'),
    };
    const result = h('div', { id: 'publish-result' });
    const form = h('form', { class: 'form', id: 'publish-form', onsubmit: (e) => { e.preventDefault(); submit(e.submitter); } },
      h('label', { for: 'publish-routing-key' }, 'Routing key'), h('div', null, f.key, fixedKey != null ? h('div', { class: 'hint' }, 'Published through the default exchange to this queue.') : null),
      h('label', null, 'Delivery mode'), f.mode,
      h('label', null, 'Headers'), f.headers,
      h('label', null, 'Properties'), f.props,
      h('label', { for: 'publish-payload' }, 'Payload'), f.payload,
      h('label', null, 'Payload encoding'), f.encoding,
      h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'publish-submit' }, 'Publish message')),
      h('div', { class: 'full' }, result));
    async function submit(btn) {
      fill(result);
      await act(btn, async () => {
        const properties = parseKV(f.props.value);
        properties.delivery_mode = +f.mode.value;
        const headers = parseKV(f.headers.value);
        if (!isEmptyObj(headers)) properties.headers = headers;
        const body = { properties, routing_key: f.key.value, payload: f.payload.value, payload_encoding: f.encoding.value };
        try {
          const r = await api('POST', `/exchanges/${enc(vhost)}/${exPath(exchange)}/publish`, body);
          fill(result, r && r.routed === false
            ? alertBox('info', h('b', null, 'Message published, but not routed: '), 'no queue is bound for this routing key.')
            : alertBox('ok', h('b', null, 'Message published.')));
        } catch (e) {
          fill(result, errorBox('Publish failed:', e));
        }
      });
    }
    return form;
  }

  // Binding rows shared by the queue and exchange pages.
  function bindingsTable(bs, vhost, perspective, onChange) {
    const dest = (b) => (b.destination_type === 'exchange'
      ? h('a', { href: `#/exchanges/${enc(vhost)}/${exPath(b.destination)}` }, tag('exchange', 'violet'), ' ', b.destination)
      : h('a', { href: `#/queues/${enc(vhost)}/${enc(b.destination)}` }, tag('queue'), ' ', b.destination));
    const src = (b) => (b.source === '' ? h('span', { class: 'muted' }, '(AMQP default)') : h('a', { href: `#/exchanges/${enc(vhost)}/${exPath(b.source)}` }, b.source));
    const cols = [
      perspective === 'source' ? { title: 'To', render: dest } : { title: 'From', render: src },
      { title: 'Routing key', render: (b) => (b.routing_key === '' ? h('span', { class: 'muted' }, '(empty)') : h('span', { class: 'mono' }, b.routing_key)) },
      { title: 'Arguments', render: (b) => argsView(b.arguments) },
      { title: '', cls: 'actions', render: (b) => (b.source === '' ? h('span', { class: 'muted small' }, 'implicit') : h('button', { class: 'btn danger small', type: 'button', onclick: (e) => unbind(e.target, b) }, 'Unbind')) },
    ];
    async function unbind(btn, b) {
      await act(btn, async () => {
        const t = b.destination_type === 'exchange' ? 'e' : 'q';
        const pk = b.properties_key != null ? b.properties_key : (b.routing_key || '~');
        await api('DELETE', `/bindings/${enc(vhost)}/e/${enc(b.source)}/${t}/${enc(b.destination)}/${enc(pk)}`);
        toast('ok', 'Binding removed');
        onChange();
      });
    }
    return table(cols, bs, 'No bindings');
  }
  function bindForm(vhost, onBind, mode) {
    // mode 'queue': bind this queue from an exchange; 'exchange': bind this exchange to a destination.
    const target = h('input', { type: 'text', id: 'bind-target', autocomplete: 'off', required: true });
    const destType = selectEl({ id: 'bind-dest-type' }, [['q', 'To queue'], ['e', 'To exchange']], 'q');
    const key = h('input', { type: 'text', id: 'bind-routing-key', autocomplete: 'off' });
    const args = h('textarea', { id: 'bind-args', rows: 2, placeholder: 'x-match = any' });
    return h('form', { class: 'form', onsubmit: (e) => {
      e.preventDefault();
      act(e.submitter, async () => {
        if (!target.value.trim()) throw new Error(mode === 'queue' ? 'Name the exchange to bind from' : 'Name the destination');
        await onBind(target.value.trim(), destType.value, key.value, parseKV(args.value));
        target.value = ''; key.value = ''; args.value = '';
      });
    } },
    h('label', null, mode === 'queue' ? 'From exchange' : 'Destination'), mode === 'queue' ? target : h('div', { class: 'row' }, destType, target),
    h('label', null, 'Routing key'), key,
    h('label', null, 'Arguments'), args,
    h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit' }, 'Bind')));
  }

  // Queue page -----------------------------------------------------------
  function queuePage(vhost, name) {
    const base = `/queues/${enc(vhost)}/${enc(name)}`;
    const headTags = h('span');
    const stats = h('div', { class: 'stats', id: 'queue-stats' });
    const details = h('div');
    const consumers = h('div');
    const bindings = h('div');
    const loadErr = h('div');
    const getResult = h('div', { id: 'get-result' });
    const streamBox = h('div', { id: 'stream-info' });
    const streamPanel = panel('Stream', { id: 'queue-stream' }, streamBox);
    streamPanel.hidden = true;
    const browse = browsePanel(base);
    const rateChart = rateChartPanel('queue-rate-chart', base, QUEUE_RATE_SERIES);
    const latency = vhostLatencyPanel(vhost);
    const g = {
      ackmode: selectEl({ id: 'get-ackmode' }, [['ack_requeue_true', 'Nack, requeue'], ['reject_requeue_true', 'Reject, requeue'], ['ack_requeue_false', 'Ack, remove from queue'], ['reject_requeue_false', 'Reject, remove from queue']], 'ack_requeue_true'),
      encoding: selectEl({ id: 'get-encoding' }, [['auto', 'Auto string / base64'], ['base64', 'Base64']], 'auto'),
      count: h('input', { type: 'number', id: 'get-count', value: '1', min: '1', max: '1000', style: 'width:90px' }),
    };
    const getForm = h('form', { class: 'form', id: 'get-form', onsubmit: (e) => { e.preventDefault(); getMessages(e.submitter); } },
      h('label', null, 'Ack mode'), g.ackmode,
      h('label', null, 'Encoding'), g.encoding,
      h('label', null, 'Messages'), g.count,
      h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'get-submit' }, 'Get messages'),
        h('span', { class: 'hint muted small' }, 'Nack/Reject with requeue leaves the messages in the queue (marked redelivered).')),
      h('div', { class: 'full' }, getResult));

    async function getMessages(btn) {
      fill(getResult);
      await act(btn, async () => {
        try {
          const msgs = await api('POST', base + '/get', { count: Math.max(1, +g.count.value || 1), ackmode: g.ackmode.value, encoding: g.encoding.value, truncate: 50000 });
          if (!msgs || !msgs.length) { fill(getResult, alertBox('info', 'Queue is empty.')); return; }
          fill(getResult, msgs.map((m, i) => h('div', { class: 'msg' },
            h('div', { class: 'msg-head' },
              h('span', null, 'Message ', h('b', null, String(i + 1))),
              h('span', null, 'Exchange ', h('b', null, exLabel(m.exchange || ''))),
              h('span', null, 'Routing key ', h('b', null, m.routing_key)),
              h('span', null, 'Redelivered ', h('b', null, m.redelivered ? 'yes' : 'no')),
              h('span', null, 'Remaining ', h('b', null, num(m.message_count))),
              h('span', null, h('b', null, bytes(m.payload_bytes)), ', ', m.payload_encoding)),
            !isEmptyObj(m.properties) ? h('div', { style: 'padding:8px 12px;border-bottom:1px solid var(--line)' }, kv(Object.entries(m.properties).map(([k, v]) => [k, h('span', { class: 'mono' }, jsonText(v))]))) : null,
            h('pre', { class: 'payload' }, m.payload))));
          refresh();
        } catch (e) {
          fill(getResult, errorBox('Get failed:', e));
        }
      });
    }
    // Move messages (RabbitMQ's UI, with shovels on): a dynamic shovel that
    // moves what the queue holds now to another queue, then deletes itself.
    const moveDest = h('input', { type: 'text', id: 'move-dest', required: true, autocomplete: 'off', placeholder: 'queue name' });
    const moveForm = h('form', { class: 'form', id: 'move-form', onsubmit: (e) => { e.preventDefault(); moveMessages(e.submitter); } },
      h('label', { for: 'move-dest' }, 'Destination queue'), moveDest,
      h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'move-submit' }, 'Move messages'),
        h('span', { class: 'hint muted small' }, 'A shovel moves every message the queue holds now (acknowledged only once the destination confirmed it), then deletes itself.')));
    async function moveMessages(btn) {
      const dest = moveDest.value.trim();
      await act(btn, async () => {
        if (!dest) throw new Error('Name the destination queue');
        const uri = 'amqp:///' + enc(vhost);
        await api('PUT', `/parameters/shovel/${enc(vhost)}/${enc('Move from ' + name)}`, { component: 'shovel', vhost, name: 'Move from ' + name, value: {
          'src-uri': uri, 'src-queue': name, 'dest-uri': uri, 'dest-queue': dest, 'src-delete-after': 'queue-length', 'ack-mode': 'on-confirm' } });
        toast('ok', `Moving the messages of ${name} to ${dest}`);
        moveDest.value = '';
        setTimeout(refresh, 500);
      });
    }
    async function purge(btn) {
      if (!confirm(`Purge all ready messages from ${name}?`)) return;
      await act(btn, async () => { await api('DELETE', base + '/contents'); toast('ok', `Queue ${name} purged`); refresh(); });
    }
    async function del(btn) {
      if (!confirm(`Delete queue ${name}?`)) return;
      await act(btn, async () => { await api('DELETE', base); toast('ok', `Queue ${name} deleted`); location.hash = '#/queues'; });
    }
    const el = h('div', null,
      pageHead(name, null, [h('a', { href: '#/queues' }, 'Queues'), ' › virtual host ', h('b', null, vhost)], [headTags,
        h('button', { class: 'btn secondary', type: 'button', id: 'queue-purge', onclick: (e) => purge(e.currentTarget) }, 'Purge'),
        h('button', { class: 'btn danger', type: 'button', id: 'queue-delete', onclick: (e) => del(e.currentTarget) }, 'Delete')]),
      loadErr, h('div', { class: 'page-body', hidden: true }, stats, rateChart.el,
      h('div', { class: 'grid two' },
        panel('Details', {}, details),
        panel('Bindings', { id: 'queue-bindings' }, bindings, h('div', { class: 'spacer' }), h('h3', { style: 'margin-top:12px' }, 'Add binding'),
          bindForm(vhost, async (ex, _t, key, args) => {
            await api('POST', `/bindings/${enc(vhost)}/e/${enc(ex)}/q/${enc(name)}`, { routing_key: key, arguments: args });
            toast('ok', 'Binding added'); refresh();
          }, 'queue'))),
      h('div', { class: 'spacer' }), h('div', { class: 'spacer' }), h('div', { class: 'spacer' }),
      latency.el,
      panel('Consumers', { flush: true, id: 'queue-consumers' }, consumers),
      h('div', { class: 'grid two' },
        panel('Get messages', { id: 'queue-get' }, getForm),
        panel('Publish message', { id: 'queue-publish' }, publishForm(vhost, '', name))),
      h('div', { class: 'grid two' },
        panel('Move messages', { id: 'queue-move' }, moveForm)),
      streamPanel, browse.el));

    async function refresh() {
      let q, bs;
      try {
        [q, bs] = await Promise.all([api('GET', base), api('GET', base + '/bindings').catch(() => null)]);
        fill(loadErr);
      } catch (e) {
        fill(loadErr, errorBox(`Could not load queue ${name}:`, e));
        return;
      }
      $('.page-body', el).hidden = false;
      fill(headTags, tag(q.type || 'classic', q.type === 'quorum' ? 'violet' : q.type === 'stream' ? 'teal' : ''), ' ', features(q), ' ', stateView(q.state));
      browse.setStream(q.type === 'stream');
      streamPanel.hidden = !q.stream;
      if (q.stream) {
        const st = q.stream;
        fill(streamBox, kv([
          ['Retention', [st.max_age ? `max age ${st.max_age}` : 'no age limit', ', ', st.max_length_bytes ? `max ${bytes(st.max_length_bytes)}` : 'no size limit',
            h('span', { class: 'muted small' }, ` (whole segments of up to ${bytes(st.max_segment_size_bytes)})`)]],
          ['Segments', h('span', { id: 'stream-segments' }, num(st.segments))],
          ['Size', bytes(st.bytes)],
          ['First offset', h('span', { id: 'stream-first-offset' }, st.last_offset < 0 ? '—' : num(st.first_offset))],
          ['Last offset', h('span', { id: 'stream-last-offset' }, st.last_offset < 0 ? '—' : num(st.last_offset))],
          ['First timestamp', st.first_timestamp ? when(st.first_timestamp) : ''],
          ['Last timestamp', st.last_timestamp ? when(st.last_timestamp) : ''],
        ]), h('h3', { style: 'margin-top:12px' }, 'Named consumers'), table([
          { title: 'Name', render: (c) => h('span', { class: 'mono' }, c.name) },
          { title: 'Offset', num: true, render: (c) => num(c.offset) },
          { title: 'Lag', num: true, render: (c) => num(c.lag) },
          { title: 'Attached', render: (c) => (c.active ? tag('yes', 'green') : tag('no')) },
        ], st.consumer_offsets || [], 'No named consumers (x-stream-consumer-name)', null, 'stream-consumers'));
      }
      fill(stats,
        stat('Ready', num(q.messages_ready ?? 0), { key: 'ready', accent: true }),
        stat('Unacked', num(q.messages_unacknowledged ?? 0), { key: 'unacked', accent: true }),
        stat('Total', num(q.messages ?? 0), { key: 'total', accent: true }),
        stat('Consumers', num(q.consumers ?? 0), { key: 'consumers' }),
        stat('Incoming', rate(rateOf(q, 'publish') ?? 0)),
        stat('Deliver / get', rate(rateOf(q, 'deliver_get') ?? 0)),
        stat('Ack', rate(rateOf(q, 'ack') ?? 0)),
        q.message_bytes != null ? stat('Bytes', bytes(q.message_bytes)) : null);
      fill(details, kv([
        ['Virtual host', vhost],
        ['Type', q.type || 'classic'],
        q.type === 'quorum' ? ['Leader', h('span', { id: 'queue-leader' }, nodeChip(q.leader, true))] : ['Node', isCluster() ? nodeChip(q.node) : q.node],
        q.type === 'quorum' ? ['Members', h('span', { id: 'queue-members' }, memberChips(q))] : null,
        ['Durable', q.durable ? 'yes' : 'no'],
        ['Auto delete', q.auto_delete ? 'yes' : 'no'],
        ['Exclusive', q.exclusive ? 'yes' : 'no'],
        ['Arguments', argsView(q.arguments)],
        ['Policy', q.policy || ''],
        q.operator_policy ? ['Operator policy', h('span', { id: 'queue-operator-policy' }, q.operator_policy)] : null,
        q.consumer_utilisation != null ? ['Consumer capacity', `${Math.round((q.consumer_capacity ?? q.consumer_utilisation) * 100)}%`] : null,
        q.memory != null ? ['Memory', bytes(q.memory)] : null,
        q.idle_since ? ['Idle since', when(q.idle_since)] : null,
        ...headMessageFigures(q),
      ]));
      rateChart.sample(q);
      latency.refresh();
      fill(consumers, table([
        { title: 'Channel', render: (c) => get(c, 'channel_details.name') || '' },
        { title: 'Consumer tag', render: (c) => h('span', { class: 'mono' }, c.consumer_tag) },
        { title: 'Ack required', render: (c) => (c.ack_required ? 'yes' : 'no') },
        { title: 'Exclusive', render: (c) => (c.exclusive ? 'yes' : 'no') },
        { title: 'Prefetch', num: true, render: (c) => num(c.prefetch_count) },
        { title: 'Active', render: (c) => (c.active === false ? tag('waiting', 'amber') : tag('active', 'green')) },
        { title: 'Arguments', render: (c) => argsView(c.arguments) },
      ], q.consumer_details || [], 'No consumers'));
      fill(bindings, bs == null ? alertBox('error', 'Could not load bindings.') : bindingsTable(bs, vhost, 'destination', refresh));
    }
    return { el, refresh };
  }

  // Browse and search (queue page): a non-destructive look at a queue's or
  // a stream's messages (GET .../browse, our extension).
  function browsePanel(base) {
    let stream = false;
    const f = {
      from: h('input', { type: 'number', id: 'browse-from', value: '0', min: '0', style: 'width:120px' }),
      time: h('input', { type: 'datetime-local', id: 'browse-time', step: '1' }),
      count: h('input', { type: 'number', id: 'browse-count', value: '20', min: '1', max: '1000', style: 'width:90px' }),
      scan: h('input', { type: 'number', id: 'browse-scan', value: '1000', min: '1', max: '100000', style: 'width:110px' }),
      key: h('input', { type: 'text', id: 'browse-routing-key', autocomplete: 'off', placeholder: 'equal to' }),
      header: h('input', { type: 'text', id: 'browse-header', autocomplete: 'off', placeholder: 'header name' }),
      value: h('input', { type: 'text', id: 'browse-value', autocomplete: 'off', placeholder: 'value (any if empty)' }),
      body: h('input', { type: 'text', id: 'browse-body', autocomplete: 'off', placeholder: 'substring' }),
    };
    const fromLabel = h('label', { for: 'browse-from' }, 'From position');
    const timeLabel = h('label', { for: 'browse-time' }, 'Or from time');
    const result = h('div', { id: 'browse-result' });
    const nextBtn = h('button', { class: 'btn secondary', type: 'button', id: 'browse-next', hidden: true }, 'Next page');
    let next = 0;
    const form = h('form', { class: 'form', id: 'browse-form', onsubmit: (e) => { e.preventDefault(); run(e.submitter, false); } },
      fromLabel, f.from, timeLabel, f.time,
      h('label', null, 'Messages'), f.count, h('label', null, 'Scan at most'), f.scan,
      h('label', null, 'Routing key'), f.key, h('label', null, 'Header'), h('div', null, f.header, ' = ', f.value),
      h('label', null, 'Body contains'), f.body,
      h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'browse-submit' }, 'Browse'), nextBtn,
        h('span', { class: 'hint muted small' }, 'Looks without consuming: nothing is taken, acknowledged or marked redelivered.')),
      h('div', { class: 'full' }, result));
    nextBtn.addEventListener('click', (e) => run(e.currentTarget, true));
    async function run(btn, more) {
      const q = new URLSearchParams();
      if (more) q.set('offset', String(next));
      else if (stream && f.time.value) q.set('timestamp', String(new Date(f.time.value).getTime()));
      else q.set('offset', String(Math.max(0, +f.from.value || 0)));
      q.set('count', String(Math.max(1, +f.count.value || 20)));
      q.set('scan', String(Math.max(1, +f.scan.value || 1000)));
      q.set('truncate', '50000');
      for (const [k, el] of [['routing_key', f.key], ['header', f.header], ['value', f.value], ['body', f.body]]) if (el.value) q.set(k, el.value);
      await act(btn, async () => {
        try {
          const page = await api('GET', `${base}/browse?${q}`);
          next = page.next;
          nextBtn.hidden = page.end;
          const msgs = page.messages || [];
          fill(result, h('div', { class: 'muted small', id: 'browse-summary' }, `${num(msgs.length)} shown of ${num(page.scanned)} looked at${page.end ? ', to the end' : `, next from ${num(page.next)}`}`),
            msgs.length ? msgs.map((m) => h('div', { class: 'msg browse-msg' },
              h('div', { class: 'msg-head' },
                h('span', null, stream ? 'Offset ' : 'Position ', h('b', null, num(stream ? m.offset : m.position))),
                h('span', null, 'Enqueued ', h('b', null, when(m.enqueued))),
                h('span', null, 'Exchange ', h('b', null, exLabel(m.exchange || ''))),
                h('span', null, 'Routing key ', h('b', null, m.routing_key)),
                h('span', null, h('b', null, bytes(m.payload_bytes)), ', ', m.payload_encoding)),
              !isEmptyObj(m.properties) ? h('div', { style: 'padding:8px 12px;border-bottom:1px solid var(--line)' }, kv(Object.entries(m.properties).map(([k, v]) => [k, h('span', { class: 'mono' }, jsonText(v))]))) : null,
              h('pre', { class: 'payload' }, m.payload))) : alertBox('info', 'No matching messages in this range.'));
        } catch (e) {
          fill(result, errorBox('Browse failed:', e));
        }
      });
    }
    return {
      el: panel('Browse and search', { id: 'queue-browse' }, form),
      setStream(v) {
        stream = v;
        fromLabel.textContent = v ? 'From offset' : 'From position';
        timeLabel.hidden = f.time.hidden = !v;
      },
    };
  }

  // Exchange page ------------------------------------------------------------
  function exchangePage(vhost, urlName) {
    const name = urlName === 'amq.default' ? '' : urlName;
    const base = `/exchanges/${enc(vhost)}/${exPath(name)}`;
    const headTags = h('span');
    const stats = h('div', { class: 'stats' });
    const details = h('div');
    const outgoing = h('div');
    const incoming = h('div');
    const loadErr = h('div');
    const builtin = name === '' || name.startsWith('amq.');
    const rateChart = rateChartPanel('exchange-rate-chart', base, EXCHANGE_RATE_SERIES);
    async function del(btn) {
      if (!confirm(`Delete exchange ${name}?`)) return;
      await act(btn, async () => { await api('DELETE', base); toast('ok', `Exchange ${name} deleted`); location.hash = '#/exchanges'; });
    }
    const superBox = h('div');
    const superPanel = panel('Super stream partitions', { id: 'super-stream' }, superBox);
    superPanel.hidden = true;
    const el = h('div', null,
      pageHead(exLabel(name), null, [h('a', { href: '#/exchanges' }, 'Exchanges'), ' › virtual host ', h('b', null, vhost)], [headTags,
        builtin ? null : h('button', { class: 'btn danger', type: 'button', id: 'exchange-delete', onclick: (e) => del(e.currentTarget) }, 'Delete')]),
      loadErr, h('div', { class: 'page-body', hidden: true }, stats, rateChart.el, superPanel,
      h('div', { class: 'grid two' },
        panel('Details', {}, details),
        panel('Publish message', { id: 'exchange-publish' }, publishForm(vhost, name, null))),
      h('div', { class: 'spacer' }), h('div', { class: 'spacer' }), h('div', { class: 'spacer' }),
      panel('Bindings from this exchange', { id: 'exchange-bindings' }, outgoing,
        name === '' ? null : [h('h3', { style: 'margin-top:16px' }, 'Add binding'), bindForm(vhost, async (dest, t, key, args) => {
          await api('POST', `/bindings/${enc(vhost)}/e/${enc(name)}/${t}/${enc(dest)}`, { routing_key: key, arguments: args });
          toast('ok', 'Binding added'); refresh();
        }, 'exchange')]),
      incoming));

    async function refresh() {
      let x, out, inc;
      try {
        [x, out, inc] = await Promise.all([api('GET', base), api('GET', base + '/bindings/source').catch(() => null), api('GET', base + '/bindings/destination').catch(() => null)]);
        fill(loadErr);
      } catch (e) {
        fill(loadErr, errorBox(`Could not load exchange ${exLabel(name)}:`, e));
        return;
      }
      $('.page-body', el).hidden = false;
      fill(headTags, tag(x.type, 'blue'), ' ', features(x));
      fill(stats, stat('Rate in', rate(rateOf(x, 'publish_in') ?? 0), { accent: true }), stat('Rate out', rate(rateOf(x, 'publish_out') ?? 0), { accent: true }),
        name === '' ? null : stat('Bindings', num(out ? out.length : 0)),
        x.messages_delayed != null ? stat('Delayed', num(x.messages_delayed), { key: 'messages_delayed' }) : null);
      fill(details, kv([
        ['Virtual host', vhost], ['Type', x.type], ['Durable', x.durable ? 'yes' : 'no'], ['Auto delete', x.auto_delete ? 'yes' : 'no'],
        ['Internal', x.internal ? 'yes' : 'no'], ['Arguments', argsView(x.arguments)], ['Policy', x.policy || ''],
      ]));
      rateChart.sample(x);
      superPanel.hidden = !x.super_stream;
      if (x.super_stream) await superStreamView(superBox, vhost, x.partitions || []);
      if (name === '') {
        fill(outgoing, alertBox('info', 'The default exchange is implicitly bound to every queue, with a routing key equal to the queue name. It cannot be bound or unbound explicitly.'));
      } else {
        fill(outgoing, out == null ? alertBox('error', 'Could not load bindings.') : bindingsTable(out, vhost, 'source', refresh));
      }
      fill(incoming, inc && inc.length ? panel('Bindings to this exchange', {}, bindingsTable(inc, vhost, 'destination', refresh)) : null);
    }
    return { el, refresh };
  }

  // superStreamView fills box with a super stream's partitions (in their
  // order: leader, members, messages, last offset, the active consumer of
  // each single-active group) and its consumer groups' positions: each
  // named consumer's stored offset and lag on every partition.
  async function superStreamView(box, vhost, partitions) {
    const [qs, cs] = await Promise.all([
      Promise.all(partitions.map((p) => api('GET', `/queues/${enc(vhost)}/${enc(p)}`).catch(() => null))),
      api('GET', `/consumers/${enc(vhost)}`).catch(() => []),
    ]);
    const active = {};
    for (const c of cs || []) {
      if (c.activity_status === 'single_active' && c.queue) active[c.queue.name] = c.consumer_tag;
    }
    const rows = partitions.map((p, i) => ({ p, i, q: qs[i] }));
    const groups = [];
    for (const r of rows) {
      for (const c of (r.q && r.q.stream && r.q.stream.consumer_offsets) || []) if (!groups.includes(c.name)) groups.push(c.name);
    }
    groups.sort();
    const offsetOf = (r, g) => ((r.q && r.q.stream && r.q.stream.consumer_offsets) || []).find((c) => c.name === g);
    fill(box, table([
      { title: '#', num: true, render: (r) => num(r.i) },
      { title: 'Partition', cls: 'name', render: (r) => h('a', { href: `#/queues/${enc(vhost)}/${enc(r.p)}` }, r.p) },
      { title: 'Leader', render: (r) => (r.q ? (r.q.leader || r.q.node || '') : tag('missing', 'red')) },
      { title: 'Members', render: (r) => (r.q && r.q.members ? r.q.members.join(', ') : '') },
      { title: 'Messages', num: true, render: (r) => (r.q && r.q.stream ? num(r.q.stream.messages) : '') },
      { title: 'Last offset', num: true, render: (r) => (r.q && r.q.stream && r.q.stream.last_offset >= 0 ? num(r.q.stream.last_offset) : '—') },
      { title: 'Active consumer', render: (r) => (active[r.p] ? h('span', { class: 'mono' }, active[r.p]) : h('span', { class: 'muted' }, '—')) },
    ], rows, 'No partitions', (r) => ({ 'data-partition': r.p }), 'super-partitions'),
    h('h3', { style: 'margin-top:12px' }, 'Consumer groups'),
    table([
      { title: 'Group', render: (g) => h('span', { class: 'mono' }, g) },
      ...rows.map((r) => ({ title: r.p, num: true, render: (g) => {
        const c = offsetOf(r, g);
        if (!c) return h('span', { class: 'muted' }, '—');
        return h('span', { title: c.active ? 'a consumer of this group is attached' : 'no consumer attached' },
          num(c.offset), h('span', { class: 'muted small' }, ` lag ${num(c.lag)}`), c.active ? [' ', tag('attached', 'green')] : null);
      } })),
    ], groups, 'No consumer group has stored an offset yet', (g) => ({ 'data-group': g }), 'super-groups'));
  }

  // Admin ------------------------------------------------------------------
  function adminTabs(active) {
    const t = (id, label) => h('a', { href: `#/admin/${id}`, class: id === active ? 'active' : null, id: `tab-${id}` }, label);
    return h('div', { class: 'tabs' }, t('users', 'Users'), t('vhosts', 'Virtual hosts'), t('permissions', 'Permissions'), t('policies', 'Policies'), t('operator-policies', 'Operator policies'), t('definitions', 'Definitions'));
  }
  function adminPage(sub) {
    sub = sub || 'users';
    const body = { users: usersView, vhosts: vhostsView, permissions: permissionsView, policies: policiesView, 'operator-policies': operatorPoliciesView, definitions: definitionsView }[sub] || usersView;
    const v = body();
    return { el: h('div', null, pageHead('Admin'), adminTabs(sub), v.el), refresh: v.refresh };
  }
  function usersView() {
    const box = h('div');
    const f = {
      name: h('input', { type: 'text', id: 'user-name', autocomplete: 'off' }),
      pass: h('input', { type: 'password', id: 'user-password', autocomplete: 'new-password' }),
      tags: h('input', { type: 'text', id: 'user-tags', placeholder: 'administrator, monitoring' }),
    };
    const tagHint = (t) => h('a', { href: '#', onclick: (e) => { e.preventDefault(); const cur = f.tags.value.split(',').map((s) => s.trim()).filter(Boolean); if (!cur.includes(t)) cur.push(t); f.tags.value = cur.join(', '); } }, t);
    const form = h('form', { class: 'form', onsubmit: (e) => {
      e.preventDefault();
      act(e.submitter, async () => {
        const name = f.name.value.trim();
        if (!name) throw new Error('The user needs a name');
        const body = { tags: f.tags.value.split(',').map((s) => s.trim()).filter(Boolean).join(',') };
        if (f.pass.value) body.password = f.pass.value; else body.password_hash = '';
        await api('PUT', `/users/${enc(name)}`, body);
        toast('ok', `User ${name} saved`);
        f.name.value = ''; f.pass.value = ''; f.tags.value = '';
        refresh();
      });
    } },
    h('label', null, 'Username'), f.name,
    h('label', null, 'Password'), h('div', null, f.pass, h('div', { class: 'hint' }, 'Leave empty for a user that cannot log in with a password.')),
    h('label', null, 'Tags'), h('div', null, f.tags, h('div', { class: 'hint' }, 'Set: ', ['administrator', 'monitoring', 'policymaker', 'management', 'impersonator'].map(tagHint))),
    h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'user-submit' }, 'Add / update user')));
    async function refresh() {
      try {
        const [users, perms] = await Promise.all([api('GET', '/users'), api('GET', '/permissions').catch(() => [])]);
        const access = {};
        for (const p of perms || []) (access[p.user] = access[p.user] || []).push(p.vhost);
        const tagsOf = (u) => (Array.isArray(u.tags) ? u.tags : String(u.tags || '').split(',')).map((s) => s.trim()).filter(Boolean);
        fill(box, table([
          { title: 'Name', cls: 'name', render: (u) => u.name },
          { title: 'Tags', render: (u) => tagsOf(u).map((t) => tag(t, t === 'administrator' ? 'red' : 'blue')) },
          { title: 'Can access vhosts', render: (u) => (access[u.name] || []).join(', ') || h('span', { class: 'muted' }, 'No access') },
          { title: 'Has password', render: (u) => (u.password_hash ? '●' : '○') },
          { title: '', cls: 'actions', render: (u) => h('button', { class: 'btn danger small', type: 'button', onclick: (e) => delUser(e.target, u.name) }, 'Delete') },
        ], users || [], 'No users'));
      } catch (e) {
        fill(box, h('div', { style: 'padding:0 16px' }, errorBox('Could not load users:', e)));
      }
    }
    async function delUser(btn, name) {
      if (!confirm(`Delete user ${name}?`)) return;
      await act(btn, async () => { await api('DELETE', `/users/${enc(name)}`); toast('ok', `User ${name} deleted`); refresh(); });
    }
    return { el: h('div', null, panel('Users', { flush: true, id: 'users' }, box), collapsible('Add / update a user', 'add-user', false, form)), refresh };
  }
  function vhostsView() {
    const box = h('div');
    const f = {
      name: h('input', { type: 'text', id: 'vhost-name', autocomplete: 'off' }),
      desc: h('input', { type: 'text', id: 'vhost-description' }),
      tags: h('input', { type: 'text', id: 'vhost-tags' }),
    };
    const form = h('form', { class: 'form', onsubmit: (e) => {
      e.preventDefault();
      act(e.submitter, async () => {
        const name = f.name.value.trim();
        if (!name) throw new Error('The virtual host needs a name');
        await api('PUT', `/vhosts/${enc(name)}`, { description: f.desc.value, tags: f.tags.value });
        toast('ok', `Virtual host ${name} added`);
        f.name.value = ''; f.desc.value = ''; f.tags.value = '';
        await loadVhosts(); refresh();
      });
    } },
    h('label', null, 'Name'), f.name, h('label', null, 'Description'), f.desc, h('label', null, 'Tags'), f.tags,
    h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'vhost-submit' }, 'Add virtual host')));
    async function refresh() {
      try {
        const vs = await api('GET', '/vhosts');
        fill(box, table([
          { title: 'Name', cls: 'name', render: (v) => h('b', null, v.name) },
          { title: 'Description', render: (v) => v.description || h('span', { class: 'muted' }, '—') },
          { title: 'Ready', num: true, render: (v) => num(v.messages_ready) },
          { title: 'Unacked', num: true, render: (v) => num(v.messages_unacknowledged) },
          { title: 'Total', num: true, render: (v) => num(v.messages) },
          { title: 'Publish', num: true, render: (v) => rate(rateOf(v, 'publish')) },
          { title: 'Deliver / get', num: true, render: (v) => rate(rateOf(v, 'deliver_get')) },
          { title: '', cls: 'actions', render: (v) => h('button', { class: 'btn danger small', type: 'button', onclick: (e) => delVhost(e.target, v.name) }, 'Delete') },
        ], Array.isArray(vs) ? vs : vs.items || [], 'No virtual hosts'));
      } catch (e) {
        fill(box, h('div', { style: 'padding:0 16px' }, errorBox('Could not load virtual hosts:', e)));
      }
    }
    async function delVhost(btn, name) {
      if (!confirm(`Delete virtual host ${name} and everything in it?`)) return;
      await act(btn, async () => { await api('DELETE', `/vhosts/${enc(name)}`); toast('ok', `Virtual host ${name} deleted`); await loadVhosts(); refresh(); });
    }
    return { el: h('div', null, panel('Virtual hosts', { flush: true, id: 'vhosts' }, box), collapsible('Add a virtual host', 'add-vhost', false, form)), refresh };
  }
  function policiesView() {
    const box = h('div');
    async function refresh() {
      try {
        const ps = await api('GET', '/policies');
        fill(box, table([
          { title: 'Virtual host', render: (p) => p.vhost },
          { title: 'Name', cls: 'name', render: (p) => h('b', null, p.name) },
          { title: 'Pattern', render: (p) => h('span', { class: 'mono' }, p.pattern) },
          { title: 'Apply to', render: (p) => p['apply-to'] },
          { title: 'Definition', render: (p) => argsView(p.definition) },
          { title: 'Priority', num: true, render: (p) => String(p.priority) },
          { title: '', cls: 'actions', render: (p) => h('span', { class: 'row' }, h('button', { class: 'btn secondary small', type: 'button', 'data-edit': p.name, onclick: () => form.edit(p) }, 'Edit'), ' ',
            h('button', { class: 'btn danger small', type: 'button', 'data-delete': p.name, onclick: (e) => delPolicy(e.target, p) }, 'Delete')) },
        ], ps || [], 'No policies', (p) => ({ 'data-policy': p.name }), 'policies-table'));
      } catch (e) {
        fill(box, h('div', { style: 'padding:0 16px' }, errorBox('Could not load policies:', e)));
      }
    }
    async function delPolicy(btn, p) {
      if (!confirm(`Delete policy ${p.name}?`)) return;
      await act(btn, async () => { await api('DELETE', `/policies/${enc(p.vhost)}/${enc(p.name)}`); toast('ok', `Policy ${p.name} deleted`); refresh(); });
    }
    const form = policyForm('policy', '/policies', () => refresh());
    return { el: h('div', null, panel('Policies', { flush: true, id: 'policies' }, box), form.el), refresh };
  }
  function permissionsView() {
    const box = h('div');
    const userSel = h('select', { id: 'perm-user' });
    const f = {
      vhost: vhostSelect({ id: 'perm-vhost' }),
      configure: h('input', { type: 'text', id: 'perm-configure', value: '.*' }),
      write: h('input', { type: 'text', id: 'perm-write', value: '.*' }),
      read: h('input', { type: 'text', id: 'perm-read', value: '.*' }),
    };
    const form = h('form', { class: 'form', onsubmit: (e) => {
      e.preventDefault();
      act(e.submitter, async () => {
        if (!userSel.value) throw new Error('Choose a user');
        await api('PUT', `/permissions/${enc(f.vhost.value)}/${enc(userSel.value)}`, { configure: f.configure.value, write: f.write.value, read: f.read.value });
        toast('ok', `Permissions set for ${userSel.value} on ${f.vhost.value}`);
        refresh();
      });
    } },
    h('label', null, 'User'), userSel, h('label', null, 'Virtual host'), f.vhost,
    h('label', null, 'Configure regexp'), f.configure, h('label', null, 'Write regexp'), f.write, h('label', null, 'Read regexp'), f.read,
    h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'perm-submit' }, 'Set permission')));
    let usersLoaded = false;
    async function refresh() {
      try {
        const [perms, users] = await Promise.all([api('GET', '/permissions'), usersLoaded ? null : api('GET', '/users').catch(() => [])]);
        if (users) {
          usersLoaded = true;
          fill(userSel, users.map((u) => h('option', { value: u.name }, u.name)));
        }
        const re = (s) => h('span', { class: 'mono' }, s === '' ? '(none)' : s);
        fill(box, table([
          { title: 'User', render: (p) => h('b', null, p.user) },
          { title: 'Virtual host', render: (p) => p.vhost },
          { title: 'Configure', render: (p) => re(p.configure) },
          { title: 'Write', render: (p) => re(p.write) },
          { title: 'Read', render: (p) => re(p.read) },
          { title: '', cls: 'actions', render: (p) => h('button', { class: 'btn danger small', type: 'button', onclick: (e) => clearPerm(e.target, p) }, 'Clear') },
        ], perms || [], 'No permissions'));
      } catch (e) {
        fill(box, h('div', { style: 'padding:0 16px' }, errorBox('Could not load permissions:', e)));
      }
    }
    async function clearPerm(btn, p) {
      if (!confirm(`Clear permissions of ${p.user} on ${p.vhost}?`)) return;
      await act(btn, async () => { await api('DELETE', `/permissions/${enc(p.vhost)}/${enc(p.user)}`); toast('ok', 'Permissions cleared'); refresh(); });
    }
    return { el: h('div', null, panel('Permissions', { flush: true, id: 'permissions' }, box), collapsible('Set permission', 'set-permission', true, form)), refresh };
  }
  function definitionsView() {
    const exportVhost = selectEl({ id: 'export-vhost' }, [['', 'All virtual hosts'], ...vhostNames.map((n) => [n, n])], '');
    const exportResult = h('div', { id: 'export-result' });
    const importVhost = selectEl({ id: 'import-vhost' }, [['', 'All virtual hosts'], ...vhostNames.map((n) => [n, n])], '');
    const file = h('input', { type: 'file', id: 'import-file', accept: '.json,application/json' });
    const importResult = h('div', { id: 'import-result' });
    async function doExport(btn) {
      fill(exportResult);
      await act(btn, async () => {
        try {
          const v = exportVhost.value;
          const defs = await api('GET', v ? `/definitions/${enc(v)}` : '/definitions');
          const blob = new Blob([JSON.stringify(defs, null, 2) + '\n'], { type: 'application/json' });
          const host = (lastOverview && lastOverview.node || 'trident').replace(/[^\w.-]+/g, '_');
          const fname = `${host}${v ? '_' + v.replace(/[^\w.-]+/g, '_') : ''}_${new Date().toISOString().slice(0, 10)}.json`;
          const a = h('a', { href: URL.createObjectURL(blob), download: fname, id: 'export-download' }, 'Download ' + fname);
          const counts = ['users', 'vhosts', 'permissions', 'exchanges', 'queues', 'bindings', 'policies'].filter((k) => Array.isArray(defs[k])).map((k) => `${defs[k].length} ${k}`).join(', ');
          fill(exportResult, alertBox('ok', h('b', null, 'Definitions ready. '), a, counts ? h('div', { class: 'small', style: 'margin-top:4px' }, counts) : null));
          a.click();
        } catch (e) {
          fill(exportResult, errorBox('Export failed:', e));
        }
      });
    }
    async function doImport(btn) {
      fill(importResult);
      await act(btn, async () => {
        const f = file.files && file.files[0];
        if (!f) { fill(importResult, alertBox('error', 'Choose a definitions file first.')); return; }
        const text = await f.text();
        try { JSON.parse(text); } catch (e) { fill(importResult, alertBox('error', h('b', null, 'Not valid JSON: '), e.message)); return; }
        try {
          const v = importVhost.value;
          await api('POST', v ? `/definitions/${enc(v)}` : '/definitions', text);
          fill(importResult, alertBox('ok', h('b', null, 'Definitions imported '), `from ${f.name}.`));
          loadVhosts();
        } catch (e) {
          fill(importResult, errorBox('Import failed:', e));
        }
      });
    }
    const el = h('div', { class: 'grid two' },
      panel('Export definitions', { id: 'export' },
        h('p', { class: 'muted', style: 'margin-top:0' }, 'Users, virtual hosts, permissions, exchanges, queues, bindings and policies as a RabbitMQ-compatible definitions.json.'),
        h('div', { class: 'inline-form' }, exportVhost, h('button', { class: 'btn', type: 'button', id: 'export-submit', onclick: (e) => doExport(e.currentTarget) }, 'Download')), exportResult),
      panel('Import definitions', { id: 'import' },
        h('p', { class: 'muted', style: 'margin-top:0' }, 'Load a definitions file exported from Trident or RabbitMQ. Existing objects are kept; new ones are added.'),
        h('div', { class: 'inline-form' }, file, importVhost, h('button', { class: 'btn', type: 'button', id: 'import-submit', onclick: (e) => doImport(e.currentTarget) }, 'Upload')), importResult));
    return { el, refresh: async () => {} };
  }

  // Nodes ----------------------------------------------------------------
  // The cluster: its members with their state, addresses and Raft roles,
  // the quorum queues with their leaders, and this node's resources. With
  // clustering off, the one node.
  function nodesPage() {
    const head = h('div');
    const stats = h('div', { class: 'stats', id: 'cluster-stats' });
    const box = h('div');
    const quorumBox = h('div');
    const localBox = h('div');
    const listenBox = h('div');
    const loadErr = h('div');
    // Below the members: the quorum queues and this node in a cluster;
    // this node and its listeners when it runs alone.
    const quorumPanel = panel('Quorum queues', { flush: true, id: 'quorum-queues' }, quorumBox);
    const localPanel = panel('This node', { id: 'local-node' }, localBox);
    const listenPanel = panel('Listeners', { flush: true, id: 'node-listeners' }, listenBox);
    const lower = h('div', { class: 'grid two' });
    const el = h('div', null, head, loadErr, stats, panel('Members', { flush: true, id: 'nodes' }, box), lower);

    // The local node's listener addresses, from the overview, for a node
    // that does not gossip them (clustering off).
    function listenAddr(proto) {
      const l = ((lastOverview && lastOverview.listeners) || []).find((x) => x.protocol === proto);
      return l ? `${String(l.ip_address).includes(':') ? `[${l.ip_address}]` : l.ip_address}:${l.port}` : '';
    }
    const addrOf = (n, proto) => n[proto + '_addr'] || (n.name === localNode() ? listenAddr(proto) : '');
    const mono = (v) => (v ? h('span', { class: 'mono' }, v) : h('span', { class: 'muted' }, '—'));
    function httpLink(addr) {
      if (!addr) return mono('');
      if (/^(0\.0\.0\.0|\[::\]|::):/.test(addr)) return mono(addr);
      return h('a', { class: 'mono', href: `http://${addr}/`, target: '_blank', rel: 'noopener' }, addr);
    }
    function stateOf(n) {
      if (n.running !== false) return stateView('running');
      const st = n.cluster_status || 'stopped';
      return h('span', { class: 'state' + (st === 'left' ? ' idle' : ' bad') }, st);
    }

    async function refresh() {
      let nodes, page;
      try {
        [nodes, page] = await Promise.all([loadNodes(), api('GET', '/queues?page=1&page_size=500&sort=name').catch(() => null)]);
        fill(loadErr);
      } catch (e) {
        fill(loadErr, errorBox('Could not load nodes:', e));
        return;
      }
      const cluster = nodes.length > 1 || nodes.some((n) => n.cluster_status);
      const raft = nodes.some((n) => n.meta_leader !== undefined);
      const running = nodes.filter((n) => n.running !== false).length;
      const leader = nodes.find((n) => n.meta_leader);
      const quorum = ((page && page.items) || []).filter((q) => q.type === 'quorum');
      const leads = {};
      for (const q of quorum) if (q.leader) leads[q.leader] = (leads[q.leader] || 0) + 1;
      const me = localNode();

      fill(head, pageHead('Nodes', cluster
        ? `Cluster ${(lastOverview && lastOverview.cluster_name) || ''} · ${running} of ${nodes.length} nodes running`
        : 'Single node · clustering is off'));
      stats.hidden = !cluster;
      if (cluster) {
        fill(stats,
          stat('Nodes', num(nodes.length), { key: 'nodes', accent: true }),
          stat('Running', h('span', { class: running < nodes.length ? 'bad-text' : null }, num(running), h('small', null, `of ${num(nodes.length)}`)), { key: 'running', accent: true }),
          raft ? stat('Metadata leader', leader ? h('span', { title: leader.name }, nodeLabel(leader.name)) : h('span', { class: 'muted' }, 'none'), { key: 'meta-leader', accent: true }) : null,
          stat('Quorum queues', num(quorum.length), { key: 'quorum', accent: true }));
      }
      fill(box, table([
        { title: 'Name', cls: 'name', render: (n) => [h('b', null, n.name), n.name === me ? h('span', null, ' ', tag('this node', 'blue')) : null] },
        { title: 'State', render: stateOf },
        raft && { title: 'Metadata', render: (n) => (n.meta_leader ? tag('leader', 'green', 'leads the metadata Raft group') : h('span', { class: 'muted' }, n.running === false ? '—' : 'follower')) },
        cluster && { title: 'Quorum leaders', num: true, render: (n) => h('span', { title: n.quorum_leader_of ? n.quorum_leader_of.join('\n') : null }, num(leads[n.name] || 0)) },
        { title: 'AMQP', render: (n) => mono(addrOf(n, 'amqp')) },
        { title: 'HTTP', render: (n) => httpLink(addrOf(n, 'http')) },
        cluster && { title: 'Raft', render: (n) => mono(n.raft_addr) },
        cluster && { title: 'Gossip', render: (n) => mono(n.gossip_addr) },
      ].filter(Boolean), nodes, 'No nodes reported',
      (n) => ({ 'data-node': n.name, class: n.meta_leader ? 'meta-leader' : null }), 'nodes-table'));

      const layout = cluster ? 'grid wide-left' : 'grid two';
      if (lower.className !== layout || !lower.children.length) {
        lower.className = layout;
        fill(lower, cluster ? [quorumPanel, localPanel] : [localPanel, listenPanel]);
      }
      fill(listenBox, table([
        { title: 'Protocol', render: (l) => h('b', null, l.protocol) },
        { title: 'Bound to', render: (l) => mono(l.ip_address) },
        { title: 'Port', num: true, render: (l) => l.port },
      ], (lastOverview && lastOverview.listeners) || [], 'No listeners reported'));
      fill(quorumBox, table([
        { title: 'Queue', cls: 'name', render: (q) => h('a', { href: `#/queues/${enc(q.vhost)}/${enc(q.name)}`, title: q.name }, q.name) },
        { title: 'Vhost', render: (q) => q.vhost },
        { title: 'Leader', render: (q) => nodeChip(q.leader, true) },
        { title: 'Members', render: (q) => memberChips(q) },
        { title: 'Messages', num: true, render: (q) => num(q.messages) },
      ], quorum, 'No quorum queues', null, 'quorum-table'));
      if (page && page.total_count > (page.items || []).length) {
        add(quorumBox, h('div', { class: 'pager' }, `Quorum queues among the first ${num(page.items.length)} of ${num(page.total_count)} queues`));
      }

      const n = nodes.find((x) => x.name === me) || nodes.find((x) => x.uptime != null) || null;
      fill(localBox, !n ? h('span', { class: 'muted' }, 'No statistics') : kv([
        ['Node', h('b', null, n.name)],
        ['Uptime', duration(n.uptime)],
        n.mem_used != null ? ['Memory', bar(n.mem_used, n.mem_limit, bytes)] : null,
        n.disk_free != null ? ['Disk free', h('span', null, bytes(n.disk_free), n.disk_free_limit ? h('span', { class: 'muted' }, ` (limit ${bytes(n.disk_free_limit)})`) : '')] : null,
        n.fd_total ? ['File descriptors', bar(n.fd_used, n.fd_total)] : null,
        n.sockets_used != null ? ['Sockets', n.sockets_total ? bar(n.sockets_used, n.sockets_total) : num(n.sockets_used)] : null,
        n.processors ? ['Cores', num(n.processors)] : null,
        n.os_pid ? ['OS pid', h('span', { class: 'mono' }, n.os_pid)] : null,
        raft ? ['Leads', n.quorum_leader_of && n.quorum_leader_of.length
          ? h('span', null, n.meta_leader ? 'the metadata group and ' : '', `${n.quorum_leader_of.length} quorum queue${n.quorum_leader_of.length === 1 ? '' : 's'}`)
          : (n.meta_leader ? 'the metadata group' : h('span', { class: 'muted' }, 'nothing'))] : null,
      ]));
    }
    return { el, refresh };
  }

  // MQTT (issue 40) ---------------------------------------------------------
  // The MQTT fleet from /api/mqtt (our extension): connected clients and
  // one client's subscriptions, sessions with offline persistent ones,
  // retained messages browsed by topic filter. Self-contained: the router
  // calls mqttPage; nothing else here is used elsewhere.
  const MQTT_NEVER = 0xFFFFFFFF;
  function mqttTabs(active) {
    const t = (id, label) => h('a', { href: `#/mqtt/${id}`, class: id === active ? 'active' : null, id: `mqtt-tab-${id}` }, label);
    return h('div', { class: 'tabs' }, t('clients', 'Clients'), t('sessions', 'Sessions'), t('retained', 'Retained messages'));
  }
  function mqttPage(sub, vhost, clientID) {
    if (sub === 'client' && vhost !== undefined && clientID) return mqttClientPage(vhost, clientID);
    sub = { sessions: 'sessions', retained: 'retained' }[sub] || 'clients';
    const v = { clients: mqttClientsView, sessions: mqttSessionsView, retained: mqttRetainedView }[sub]();
    return { el: h('div', { id: 'mqtt-page' }, pageHead('MQTT', 'Clients, sessions and retained messages on this node'), mqttTabs(sub), v.el), refresh: v.refresh };
  }
  function mqttExpiry(s) {
    if (s.session_expiry_never) return h('span', { title: 'session expiry interval' }, 'never');
    if (!s.session_expiry_interval) return h('span', { class: 'muted', title: 'ends with the connection' }, 'at disconnect');
    return h('span', { title: `${num(s.session_expiry_interval)} s` }, duration(s.session_expiry_interval * 1000));
  }
  const mqttClientHref = (c) => `#/mqtt/client/${enc(c.vhost)}/${enc(c.client_id)}`;
  async function mqttDisconnect(btn, c, done) {
    if (!confirm(`Disconnect MQTT client ${c.client_id}?`)) return;
    await act(btn, async () => {
      await api('DELETE', `/mqtt/clients/${enc(c.vhost)}/${enc(c.client_id)}`);
      toast('ok', `Client ${c.client_id} disconnected`);
      done();
    });
  }
  function mqttClientsView() {
    const list = pagedList({
      key: 'mqtt-clients', id: 'mqtt-clients', title: 'Connected clients', noun: 'client', path: vhostPath('/mqtt/clients'),
      columns: () => [
        { title: 'Client ID', sort: 'name', cls: 'name', render: (c) => h('a', { href: mqttClientHref(c), title: c.name }, c.client_id) },
        showVhostCol() && { title: 'Vhost', sort: 'vhost', render: (c) => c.vhost },
        { title: 'User', sort: 'user', render: (c) => c.user },
        { title: 'Protocol', sort: 'protocol_version', render: (c) => protocolView(c.protocol) },
        { title: 'Keep-alive', sort: 'keepalive', num: true, render: (c) => (c.keepalive ? duration(c.keepalive * 1000) : h('span', { class: 'muted' }, 'off')) },
        { title: 'Session', render: (c) => [c.clean_session ? tag('clean', '', 'clean session / clean start') : tag('persistent', 'blue', 'clean session false: the session outlives the connection'), ' ', mqttExpiry(c)] },
        { title: 'Peer', render: (c) => h('span', { class: 'mono' }, `${c.peer_host}:${c.peer_port}`) },
        { title: 'Subs', sort: 'subscriptions', num: true, render: (c) => num(c.subscriptions) },
        { title: 'Inflight', sort: 'inflight', num: true, render: (c) => num(c.inflight) },
        { title: 'Queued', sort: 'queued', num: true, render: (c) => num(c.queued) },
        { title: 'In / out', render: (c) => h('span', { title: `${num(c.publish_in)} PUBLISH in, ${num(c.publish_out)} out` }, `${compact(c.publish_in)} / ${compact(c.publish_out)}`), num: true },
        { title: 'Connected', sort: 'connected_at', render: (c) => h('span', { title: when(c.connected_at) }, ago(c.connected_at)) },
        { title: '', cls: 'actions', render: (c) => h('button', { class: 'btn danger small', type: 'button', 'data-disconnect': c.client_id, onclick: (e) => mqttDisconnect(e.target, c, list.refresh) }, 'Disconnect') },
      ],
    });
    return list;
  }
  function mqttClientPage(vhost, clientID) {
    const box = h('div', null, h('div', { class: 'loading' }, 'Loading…'));
    const base = `/mqtt/clients/${enc(vhost)}/${enc(clientID)}`;
    let gone = false;
    async function refresh() {
      if (gone) return;
      let c;
      try { c = await api('GET', base); } catch (e) {
        fill(box, e.status === 404 ? alertBox('info', `Client ${clientID} is not connected.`, ' ', h('a', { href: `#/mqtt/sessions` }, 'Sessions')) : errorBox('Could not load the client:', e));
        return;
      }
      const subs = c.subscription_list || [];
      const yes = (v) => (v ? 'yes' : 'no');
      fill(box,
        panel('Client', { id: 'mqtt-client-details' }, kv([
          ['Client ID', h('span', { class: 'mono' }, c.client_id)], ['Virtual host', c.vhost], ['User', c.user],
          ['Protocol', protocolView(c.protocol)],
          ['Keep-alive', c.keepalive ? duration(c.keepalive * 1000) : 'off'],
          ['Clean session / start', yes(c.clean_session)], ['Session expiry', mqttExpiry(c)],
          ['Peer', h('span', { class: 'mono' }, `${c.peer_host}:${c.peer_port}`)],
          ['Connected', h('span', { title: when(c.connected_at) }, `${when(c.connected_at)} (${ago(c.connected_at)})`)],
          ['Connection', h('span', { class: 'mono small' }, c.name)],
          ['Inflight', num(c.inflight)], ['Queued', num(c.queued)], ['Unacknowledged', num(c.unacked)],
          ['PUBLISH in / out', `${num(c.publish_in)} / ${num(c.publish_out)}`],
          ['Bytes in / out', `${bytes(c.recv_oct)} / ${bytes(c.send_oct)}`],
          ['Queue', c.queue ? h('a', { href: `#/queues/${enc(c.vhost)}/${enc(c.queue)}` }, c.queue) : ''],
        ])),
        panel('Subscriptions', { id: 'mqtt-client-subs', count: h('span', { class: 'muted small' }, num(subs.length)), flush: true },
          table([
            { title: 'Topic filter', cls: 'name', render: (s) => h('span', { class: 'mono' }, s.topic_filter) },
            { title: 'QoS', num: true, render: (s) => s.qos },
            { title: 'Shared group', render: (s) => s.share_group || h('span', { class: 'muted' }, '—') },
            { title: 'No local', render: (s) => yes(s.no_local) },
            { title: 'Retain as published', render: (s) => yes(s.retain_as_published) },
            { title: 'Retain handling', num: true, render: (s) => s.retain_handling },
            { title: 'Subscription id', num: true, render: (s) => (s.subscription_identifier ? s.subscription_identifier : '') },
          ], subs, 'No subscriptions', null, 'mqtt-subs-table')));
    }
    const disc = h('button', { class: 'btn danger', type: 'button', id: 'mqtt-disconnect', onclick: () => mqttDisconnect(disc, { vhost, client_id: clientID }, () => { gone = true; location.hash = '#/mqtt/clients'; }) }, 'Disconnect');
    return {
      el: h('div', null, pageHead(clientID, 'MQTT client', [h('a', { href: '#/mqtt/clients' }, 'MQTT'), ' › virtual host ', h('b', null, vhost)], [disc]), box),
      refresh,
    };
  }
  function mqttSessionsView() {
    const list = pagedList({
      key: 'mqtt-sessions', id: 'mqtt-sessions', title: 'Sessions', noun: 'session', path: vhostPath('/mqtt/sessions'),
      columns: () => [
        { title: 'Client ID', sort: 'name', cls: 'name', render: (s) => (s.connected ? h('a', { href: mqttClientHref(s) }, s.client_id) : s.client_id) },
        showVhostCol() && { title: 'Vhost', sort: 'vhost', render: (s) => s.vhost },
        { title: 'User', sort: 'user', render: (s) => s.user },
        { title: 'State', sort: 'connected', render: (s) => (s.connected ? tag('connected', 'green') : tag('offline', 'amber')) },
        { title: 'Expiry', sort: 'session_expiry_interval', render: (s) => mqttExpiry(s) },
        { title: 'Expires', sort: 'expires_at', render: (s) => (s.expires_at ? h('span', { title: when(s.expires_at) }, 'in ' + duration(Math.max(0, s.expires_at - Date.now()))) : h('span', { class: 'muted' }, s.connected ? '—' : 'never')) },
        { title: 'Subs', sort: 'subscriptions', num: true, render: (s) => num(s.subscriptions) },
        { title: 'Queued', sort: 'queued', num: true, render: (s) => num(s.queued) },
        { title: 'Unacked', sort: 'unacked', num: true, render: (s) => num(s.unacked) },
        { title: '', cls: 'actions', render: (s) => (s.connected ? null : h('button', { class: 'btn danger small', type: 'button', 'data-delete-session': s.client_id, onclick: (e) => del(e.target, s) }, 'Delete')) },
      ],
    });
    async function del(btn, s) {
      if (!confirm(`Delete the session of ${s.client_id} and its ${s.queued} queued messages?`)) return;
      await act(btn, async () => {
        await api('DELETE', `/mqtt/sessions/${enc(s.vhost)}/${enc(s.client_id)}`);
        toast('ok', `Session ${s.client_id} deleted`);
        list.refresh();
      });
    }
    return list;
  }
  function mqttRetainedView() {
    const st = Object.assign({ topic: '#', page: 1, page_size: 50 }, prefs.lists['mqtt-retained'] || {});
    const save = () => { prefs.lists['mqtt-retained'] = st; savePrefs(); };
    const topic = h('input', { type: 'search', id: 'mqtt-retained-topic', value: st.topic, placeholder: 'Topic filter, e.g. devices/+/status or #', 'aria-label': 'Topic filter' });
    const sizeSel = selectEl({ 'aria-label': 'Page size' }, [['20', '20'], ['50', '50'], ['100', '100'], ['500', '500']], String(st.page_size));
    const countEl = h('span', { class: 'muted small', id: 'mqtt-retained-count' });
    const errEl = h('div');
    const body = h('div');
    const pager = h('div', { class: 'pager' });
    const form = h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); st.topic = topic.value.trim() || '#'; st.page = 1; save(); refresh(); } },
      topic, h('button', { class: 'btn secondary small', type: 'submit', id: 'mqtt-retained-search' }, 'Browse'), h('span', { class: 'grow' }),
      h('label', { class: 'small muted' }, 'Page size ', sizeSel));
    sizeSel.addEventListener('change', () => { st.page_size = +sizeSel.value; st.page = 1; save(); refresh(); });
    async function del(btn, m) {
      if (!confirm(`Clear the retained message of ${m.topic}?`)) return;
      await act(btn, async () => {
        await api('DELETE', `/mqtt/retained/${enc(m.vhost)}?topic=${enc(m.topic)}`);
        toast('ok', `Retained message of ${m.topic} cleared`);
        refresh();
      });
    }
    function payloadView(m) {
      const text = m.payload || '';
      return h('span', { class: 'mono', title: m.payload_truncated ? `first bytes of ${num(m.payload_bytes)}` : null },
        m.payload_encoding === 'base64' ? tag('base64', 'violet', 'not UTF-8: shown in base64') : null,
        text.length > 120 ? text.slice(0, 120) + '…' : text, m.payload_truncated && text.length <= 120 ? '…' : null);
    }
    let seq = 0;
    async function refresh() {
      const my = ++seq;
      const q = new URLSearchParams({ topic: st.topic, page: st.page, page_size: st.page_size });
      if (prefs.vhost) q.set('vhost', prefs.vhost);
      let res;
      try {
        res = await api('GET', '/mqtt/retained?' + q);
        if (my !== seq) return;
        fill(errEl);
      } catch (e) {
        if (my !== seq) return;
        fill(errEl, h('div', { style: 'padding:0 16px' }, errorBox('Could not browse retained messages:', e)));
        return;
      }
      if (res.page_count && st.page > res.page_count) { st.page = res.page_count; save(); refresh(); return; }
      const items = res.items || [];
      countEl.textContent = `${num(res.filtered_count)} matching`;
      fill(body, table([
        { title: 'Topic', cls: 'name', render: (m) => h('span', { class: 'mono', title: m.topic }, m.topic) },
        showVhostCol() && { title: 'Vhost', render: (m) => m.vhost },
        { title: 'QoS', num: true, render: (m) => m.qos },
        { title: 'Size', num: true, render: (m) => bytes(m.payload_bytes) },
        { title: 'Payload', cls: 'wrap', render: (m) => payloadView(m) },
        { title: 'Content type', render: (m) => m.content_type || h('span', { class: 'muted' }, '—') },
        { title: 'Stored', render: (m) => (m.stored_at ? h('span', { title: when(m.stored_at) }, ago(m.stored_at)) : h('span', { class: 'muted' }, '—')) },
        { title: 'Expires', render: (m) => (m.expires_at ? h('span', { title: when(m.expires_at) }, 'in ' + duration(Math.max(0, m.expires_at - Date.now()))) : h('span', { class: 'muted' }, 'never')) },
        { title: '', cls: 'actions', render: (m) => h('button', { class: 'btn danger small', type: 'button', 'data-clear': m.topic, onclick: (e) => del(e.target, m) }, 'Delete') },
      ].filter(Boolean), items, `No retained message matches ${st.topic}`, null, 'mqtt-retained-table'));
      const pages = res.page_count || 1;
      const go = (p) => { st.page = p; save(); refresh(); };
      fill(pager,
        h('span', { class: 'grow' }, items.length ? `Showing ${num((st.page - 1) * st.page_size + 1)}–${num((st.page - 1) * st.page_size + items.length)} of ${num(res.filtered_count)}` : ''),
        h('button', { class: 'btn secondary small', type: 'button', disabled: st.page <= 1, onclick: () => go(st.page - 1) }, '‹ Prev'),
        h('span', null, `Page ${num(res.page || st.page)} of ${num(pages)}`),
        h('button', { class: 'btn secondary small', type: 'button', disabled: st.page >= pages, onclick: () => go(st.page + 1) }, 'Next ›'));
    }
    const el = h('section', { class: 'panel', id: 'mqtt-retained' },
      h('div', { class: 'panel-head' }, h('h2', null, 'Retained messages'), countEl), form, errEl, body, pager);
    return { el, refresh };
  }

  // Login -------------------------------------------------------------------
  function loginPage(message) {
    const user = h('input', { type: 'text', id: 'login-username', autocomplete: 'username', required: true, autofocus: true });
    const pass = h('input', { type: 'password', id: 'login-password', autocomplete: 'current-password' });
    const err = h('div', { id: 'login-error' }, message ? alertBox('error', message) : null);
    const btn = h('button', { class: 'btn', type: 'submit', id: 'login-submit' }, 'Log in');
    const form = h('form', { class: 'login-card', onsubmit: async (e) => {
      e.preventDefault();
      fill(err);
      btn.disabled = true;
      try {
        const why = await credentialLogin('Basic ' + b64(`${user.value}:${pass.value}`));
        if (why !== null) fill(err, alertBox('error', h('b', null, 'Login failed. '), why && why !== 'Login failed' ? why : 'Check the username and password.'));
      } catch (ex) {
        fill(err, alertBox('error', 'Cannot reach the server: ' + ex.message));
      } finally {
        btn.disabled = false;
      }
    } },
    h('div', { class: 'brand' }, h('img', { src: 'favicon.svg', alt: '', width: 30, height: 30 }), h('span', null, 'Trident')),
    h('p', { class: 'sub' }, 'Management console'),
    h('label', { for: 'login-username' }, 'Username'), user,
    h('label', { for: 'login-password' }, 'Password'), pass,
    btn, err,
    h('div', { id: 'login-oauth-box' }),
    h('div', { class: 'foot' }, 'AMQP · MQTT · STOMP message broker'));
    setTimeout(() => user.focus(), 0);
    oauthLoginBox(form.querySelector('#login-oauth-box'), err);
    return h('div', { class: 'login-wrap' }, form);
  }

  // credentialLogin checks an Authorization value with /api/whoami and
  // starts the console with it; it returns null on success, else the
  // server's reason.
  async function credentialLogin(authorization) {
    const res = await fetch('api/whoami', { headers: { Authorization: authorization, Accept: 'application/json' }, credentials: 'omit', cache: 'no-store' });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) return body.reason || res.statusText || 'Login failed';
    sessionStorage.setItem(AUTH_KEY, authorization);
    sessionStorage.setItem(USER_KEY, JSON.stringify(body));
    start();
    return null;
  }

  // OAuth 2 login ------------------------------------------------------------
  // As RabbitMQ's UI: the authorization-code flow with PKCE (S256) run by
  // the browser against the provider the broker names in /api/auth, or an
  // access token pasted by hand. The token is then sent as a Bearer token.
  function b64url(bytes) {
    return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }
  function redirectURI() { return location.origin + location.pathname; }
  async function authSettings() {
    try {
      const res = await fetch('api/auth', { headers: { Accept: 'application/json' }, credentials: 'omit', cache: 'no-store' });
      return res.ok ? await res.json() : {};
    } catch (_) { return {}; }
  }
  async function oauthLoginBox(box, err) {
    const cfg = await authSettings();
    if (!cfg.oauth_enabled) return;
    const token = h('textarea', { id: 'login-token', rows: 3, placeholder: 'Paste an access token (JWT)', spellcheck: 'false' });
    const useToken = h('button', { class: 'btn secondary', type: 'button', id: 'login-token-submit', onclick: async () => {
      fill(err);
      const why = await credentialLogin('Bearer ' + token.value.trim()).catch((e) => e.message);
      if (why !== null) fill(err, alertBox('error', h('b', null, 'Token refused. '), why));
    } }, 'Log in with this token');
    const go = h('button', { class: 'btn', type: 'button', id: 'login-oauth', onclick: () => oauthStart(cfg).catch((e) => fill(err, alertBox('error', 'OAuth 2 login failed: ' + e.message))) },
      'Log in with OAuth 2');
    fill(box, h('div', { class: 'or' }, 'or'), cfg.oauth_authorization_endpoint ? go : null,
      h('label', { for: 'login-token' }, 'Access token'), token, useToken);
  }
  async function oauthStart(cfg) {
    if (!cfg.oauth_authorization_endpoint || !cfg.oauth_token_endpoint) throw new Error('the provider\'s endpoints are unknown');
    if (!window.crypto || !crypto.subtle) throw new Error('the browser computes PKCE only on https:// or localhost pages: use the HTTPS listener');
    const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
    const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
    const challenge = b64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
    sessionStorage.setItem(OAUTH_KEY, JSON.stringify({ verifier, state, hash: location.hash }));
    const u = new URL(cfg.oauth_authorization_endpoint);
    const q = { response_type: 'code', client_id: cfg.oauth_client_id, redirect_uri: redirectURI(), scope: cfg.oauth_scopes || 'openid',
      state, code_challenge: challenge, code_challenge_method: 'S256' };
    for (const [k, v] of Object.entries(q)) u.searchParams.set(k, v);
    location.assign(u.toString());
  }
  // oauthCallback finishes a login when the provider redirected back with
  // ?code=...&state=...; it returns whether it handled the page load.
  async function oauthCallback() {
    const q = new URLSearchParams(location.search);
    if (!q.has('code') && !q.has('error')) return false;
    const saved = JSON.parse(sessionStorage.getItem(OAUTH_KEY) || 'null');
    sessionStorage.removeItem(OAUTH_KEY);
    history.replaceState(null, '', location.pathname + ((saved && saved.hash) || ''));
    const fail = (why) => { showLogin('OAuth 2 login failed: ' + why); return true; };
    if (q.has('error')) return fail(q.get('error') + (q.get('error_description') ? ' — ' + q.get('error_description') : ''));
    if (!saved || saved.state !== q.get('state')) return fail('the answer does not belong to a login started here (state mismatch)');
    const cfg = await authSettings();
    const form = new URLSearchParams({ grant_type: 'authorization_code', code: q.get('code'), redirect_uri: redirectURI(),
      client_id: cfg.oauth_client_id || '', code_verifier: saved.verifier });
    if (cfg.oauth_client_secret) form.set('client_secret', cfg.oauth_client_secret);
    let tok;
    try {
      const res = await fetch(cfg.oauth_token_endpoint, { method: 'POST', body: form, credentials: 'omit',
        headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' } });
      tok = await res.json().catch(() => ({}));
      if (!res.ok || !tok.access_token) return fail(`the token endpoint answered ${res.status} ${tok.error || ''}`);
    } catch (e) {
      return fail('cannot reach the token endpoint: ' + e.message);
    }
    const why = await credentialLogin('Bearer ' + tok.access_token);
    if (why !== null) return fail('the broker refused the token: ' + why);
    return true;
  }

  // ------------------------------------------- operations pages (issue 40)
  // The connection page, the queue's and exchange's rate charts, the
  // shovels page and the policy forms. Self-contained: the pages above
  // call into this section only where they show its pieces.

  // A byte rate in decimal units, as RabbitMQ's UI: 133 B/s, 1.2 kB/s.
  function byteRate(v) {
    if (v == null || v === '' || isNaN(v)) return '';
    v = Number(v);
    const u = ['B/s', 'kB/s', 'MB/s', 'GB/s', 'TB/s'];
    let i = 0;
    while (Math.abs(v) >= 999.5 && i < u.length - 1) { v /= 1000; i++; }
    if (i === 0) return Math.round(v) + ' ' + u[0];
    return (Math.abs(v) < 9.95 ? v.toFixed(1) : String(Math.round(v))) + ' ' + u[i];
  }
  // A connection's client: product and version, the whole in the title.
  function clientLabel(c) {
    const p = c.client_properties || {};
    const s = [p.product, p.version].filter(Boolean).join(' ');
    if (!s) return h('span', { class: 'muted' }, '—');
    return h('span', { title: [s, p.platform].filter(Boolean).join(' · ') }, s.replace(/^https?:\/\/(www\.)?github\.com\//, ''));
  }

  // A channel's name, "<connection> (<n>)", linked to its connection's
  // page; a long connection name is cut, never the channel's number.
  function channelLabel(c) {
    const conn = get(c, 'connection_details.name');
    if (!conn || !c.name.startsWith(conn)) return h('span', { title: c.name }, c.name);
    return h('a', { href: `#/connections/${enc(conn)}`, title: c.name, class: 'chan-label' },
      h('span', { class: 'chan-conn' }, conn), h('span', null, c.name.slice(conn.length)));
  }

  // Object rates sampled by the page ------------------------------------
  // Each queue or exchange page records the rates it reads on every
  // refresh, so that its chart covers the last CHART_SECONDS while the
  // page (or an earlier visit to it) was open.
  const CHART_SECONDS = 300;
  const objHistory = new Map(); // API path → [{t, v}]
  function recordRates(key, v) {
    const now = Date.now();
    let xs = objHistory.get(key);
    if (!xs) {
      xs = [];
      objHistory.set(key, xs);
      if (objHistory.size > 100) objHistory.delete(objHistory.keys().next().value);
    }
    if (xs.length && now - xs[xs.length - 1].t < 1000) xs.pop();
    xs.push({ t: now, v });
    while (xs.length && xs[0].t < now - CHART_SECONDS * 1000) xs.shift();
    return xs;
  }
  // A small inline SVG line chart of rates over the last CHART_SECONDS.
  function svgRateChart(id, series) {
    const NS = 'http://www.w3.org/2000/svg';
    const H = 170, pad = { l: 48, r: 12, t: 8, b: 20 };
    let W = 600;
    const s = (tagName, attrs, txt) => {
      const e = document.createElementNS(NS, tagName);
      for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
      if (txt != null) e.textContent = txt;
      return e;
    };
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'rate-chart', role: 'img', 'aria-label': 'message rates' });
    const legend = h('div', { class: 'legend' });
    const el = h('div', { class: 'svg-chart', id }, svg, legend);
    // The axis' top: four steps of 1, 2, 2.5 or 5 times a power of ten.
    function niceTop(max) {
      if (!(max > 0)) return 1;
      const v = max / 4, p = Math.pow(10, Math.floor(Math.log10(v)));
      for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return 4 * m * p;
      return 40 * p;
    }
    let lastPoints = [];
    function update(points) {
      lastPoints = points;
      W = Math.max(300, Math.round(el.clientWidth || W));
      svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
      svg.replaceChildren();
      const now = Date.now(), t0 = now - CHART_SECONDS * 1000;
      const pw = W - pad.l - pad.r, ph = H - pad.t - pad.b;
      let max = 0;
      for (const p of points) for (const se of series) max = Math.max(max, p.v[se.key] || 0);
      const top = niceTop(max);
      const x = (t) => pad.l + Math.max(0, (t - t0) / (now - t0)) * pw;
      const y = (v) => pad.t + ph - (v / top) * ph;
      for (let i = 0; i <= 4; i++) {
        const v = (top / 4) * i, yy = y(v).toFixed(1);
        svg.append(s('line', { x1: pad.l, x2: W - pad.r, y1: yy, y2: yy, class: 'grid' }),
          s('text', { x: pad.l - 6, y: yy, 'text-anchor': 'end', 'dominant-baseline': 'middle', class: 'axis' }, compact(v) + '/s'));
      }
      for (let m = CHART_SECONDS / 60; m >= 0; m--) {
        svg.append(s('text', { x: Math.min(x(now - m * 60000), W - pad.r - 10).toFixed(1), y: H - 4, 'text-anchor': 'middle', class: 'axis' }, m ? `-${m}m` : 'now'));
      }
      for (const se of series) {
        const pts = points.map((p) => `${x(p.t).toFixed(1)},${y(p.v[se.key] || 0).toFixed(1)}`).join(' ');
        if (points.length > 1) svg.append(s('polyline', { points: pts, fill: 'none', stroke: se.color, 'stroke-width': 2, 'stroke-linejoin': 'round', 'data-series': se.key }));
        else if (points.length === 1) svg.append(s('circle', { cx: x(points[0].t), cy: y(points[0].v[se.key] || 0), r: 3, fill: se.color, 'data-series': se.key }));
      }
      if (points.length < 2) svg.append(s('text', { x: pad.l + pw / 2, y: pad.t + ph / 2, 'text-anchor': 'middle', class: 'axis' }, 'Collecting samples…'));
      const last = points[points.length - 1];
      fill(legend, series.map((se) => h('span', { class: 'item', 'data-series': se.key }, h('span', { class: 'sw', style: `background:${se.color}` }), se.label,
        h('span', { class: 'v' }, last ? rate(last.v[se.key] || 0) : '—'))));
    }
    new ResizeObserver(() => { if (Math.abs((el.clientWidth || W) - W) > 4) update(lastPoints); }).observe(el);
    return { el, update };
  }
  const QUEUE_RATE_SERIES = [
    { key: 'publish', label: 'Publish', color: '#1f4fd1' },
    { key: 'deliver_get', label: 'Deliver / get', color: '#1d8a4f' },
    { key: 'ack', label: 'Ack', color: '#e0831f' },
    { key: 'redeliver', label: 'Redeliver', color: '#c62f2f' },
  ];
  const EXCHANGE_RATE_SERIES = [
    { key: 'publish_in', label: 'Publish in', color: '#1f4fd1' },
    { key: 'publish_out', label: 'Publish out', color: '#1d8a4f' },
  ];
  // rateChartPanel: the chart of one object, fed by its API object.
  function rateChartPanel(id, key, series) {
    const chart = svgRateChart(id, series);
    chart.update(objHistory.get(key) || []);
    return {
      el: panel('Message rates', { id: id + '-panel', right: h('span', { class: 'muted small' }, `last ${CHART_SECONDS / 60} minutes, sampled by this page`) }, chart.el),
      sample(obj) {
        const v = {};
        for (const se of series) v[se.key] = rateOf(obj, se.key) || 0;
        chart.update(recordRates(key, v));
      },
    };
  }
  // The head message's age and timestamp (queue page).
  function headMessageFigures(q) {
    const age = q.head_message_age_seconds, ts = q.head_message_timestamp;
    return [
      ['Head message age', age == null ? '' : h('span', { id: 'queue-head-age', title: `${age} s` }, age < 1 ? `${Math.round(age * 1000)} ms` : duration(age * 1000))],
      ['Head message timestamp', ts == null ? '' : h('span', { id: 'queue-head-timestamp' }, when(ts * 1000))],
    ];
  }

  // Latency of a vhost (GET /api/latency/{vhost}, a Trident extension):
  // since the node started, and over the window this page has sampled
  // (the difference of two readings of the cumulative buckets).
  function seconds(v) {
    if (v == null || isNaN(v)) return '';
    if (v < 0.001) return (v * 1000).toFixed(2) + ' ms';
    if (v < 0.01) return (v * 1000).toFixed(1) + ' ms';
    if (v < 1) return Math.round(v * 1000) + ' ms';
    return v.toFixed(2) + ' s';
  }
  function bucketQuantile(q, buckets, count) {
    if (!count || !buckets.length) return null;
    const rank = q * count;
    let prev = 0;
    for (let i = 0; i < buckets.length; i++) {
      if (buckets[i].count >= rank) {
        const lower = i ? buckets[i - 1].le : 0, inb = buckets[i].count - prev;
        return inb ? lower + (buckets[i].le - lower) * (rank - prev) / inb : buckets[i].le;
      }
      prev = buckets[i].count;
    }
    return buckets[buckets.length - 1].le;
  }
  const LATENCY_LABELS = { publish_to_confirm: 'Publish → confirm', enqueue_to_deliver: 'Enqueue → deliver', deliver_to_ack: 'Deliver → ack' };
  const latencyHistory = new Map(); // vhost/protocol/metric → [{t, count, buckets}]
  function vhostLatencyPanel(vhost) {
    const box = h('div', { id: 'vhost-latency' });
    async function refresh() {
      let ls;
      try { ls = await api('GET', `/latency/${enc(vhost)}`); } catch (e) { fill(box, h('span', { class: 'muted' }, 'Not available: ' + errText(e))); return; }
      const now = Date.now();
      const rows = (ls || []).map((l) => {
        const key = `${l.vhost}\u0000${l.protocol}\u0000${l.metric}`;
        let hist = latencyHistory.get(key);
        if (!hist) { hist = []; latencyHistory.set(key, hist); }
        hist.push({ t: now, count: l.count, buckets: l.buckets || [] });
        while (hist.length > 1 && hist[0].t < now - CHART_SECONDS * 1000) hist.shift();
        const old = hist[0];
        let recent = null;
        if (old.t < now && l.count > old.count) {
          const diff = (l.buckets || []).map((b, i) => ({ le: b.le, count: b.count - ((old.buckets[i] || {}).count || 0) }));
          recent = { n: l.count - old.count, p99: bucketQuantile(0.99, diff, l.count - old.count), secs: (now - old.t) / 1000 };
        }
        return Object.assign({}, l, { recent });
      });
      rows.sort((a, b) => Object.keys(LATENCY_LABELS).indexOf(a.metric) - Object.keys(LATENCY_LABELS).indexOf(b.metric) || a.protocol.localeCompare(b.protocol));
      fill(box, table([
        { title: 'Latency', render: (l) => LATENCY_LABELS[l.metric] || l.metric },
        { title: 'Protocol', render: (l) => protocolView(l.protocol.replace(/^amqp091$/, 'AMQP 0-9-1').replace(/^mqtt$/, 'MQTT').replace(/^stomp$/, 'STOMP')) },
        { title: 'Count', num: true, render: (l) => num(l.count) },
        { title: 'Mean', num: true, render: (l) => seconds(l.mean_seconds) },
        { title: 'p50', num: true, render: (l) => seconds(l.p50_seconds) },
        { title: 'p99', num: true, cls: 'num lat-p99', render: (l) => seconds(l.p99_seconds) },
        { title: 'Recent p99', num: true, render: (l) => (l.recent ? h('span', { title: `${num(l.recent.n)} observations in the last ${Math.round(l.recent.secs)} s` }, seconds(l.recent.p99)) : h('span', { class: 'muted' }, '—')) },
      ], rows, 'Nothing measured in this virtual host yet', (l) => ({ 'data-metric': l.metric, 'data-protocol': l.protocol }), 'vhost-latency-table'));
    }
    return {
      el: panel(`Latency in virtual host ${vhost}`, { flush: true, id: 'queue-latency', right: h('span', { class: 'muted small' }, 'since the node started; recent: sampled by this page') }, box),
      refresh,
    };
  }

  // Connection page -------------------------------------------------------
  function connectionPage(name) {
    const base = `/connections/${enc(name)}`;
    const stats = h('div', { class: 'stats', id: 'connection-stats' });
    const details = h('div', { id: 'connection-details' });
    const props = h('div', { id: 'connection-props' });
    const chans = h('div', { id: 'connection-channels' });
    const loadErr = h('div');
    async function closeIt(btn) {
      if (!confirm(`Close connection ${name}?`)) return;
      await act(btn, async () => {
        await api('DELETE', base, undefined, { 'X-Reason': 'Closed via management UI' });
        toast('ok', 'Connection closed');
        location.hash = '#/connections';
      });
    }
    const body = h('div', { class: 'page-body', hidden: true }, stats,
      h('div', { class: 'grid two' }, panel('Details', {}, details), panel('Client properties', { id: 'connection-client-properties' }, props)),
      h('div', { class: 'spacer' }), h('div', { class: 'spacer' }), h('div', { class: 'spacer' }),
      panel('Channels', { flush: true }, chans));
    const el = h('div', null,
      pageHead(name, null, [h('a', { href: '#/connections' }, 'Connections')],
        [h('button', { class: 'btn danger', type: 'button', id: 'connection-close', onclick: (e) => closeIt(e.currentTarget) }, 'Close connection')]),
      loadErr, body);
    function propValue(v) {
      if (v && typeof v === 'object' && !Array.isArray(v)) {
        const ks = Object.keys(v);
        if (ks.length && ks.every((k) => typeof v[k] === 'boolean')) return h('span', null, ks.sort().map((k) => tag(k, v[k] ? 'green' : '', v[k] ? 'supported' : 'not supported')));
        return h('span', { class: 'mono' }, jsonText(v));
      }
      return h('span', { class: typeof v === 'string' ? null : 'mono' }, jsonText(v));
    }
    async function refresh() {
      let c, cs;
      try {
        [c, cs] = await Promise.all([api('GET', base), api('GET', base + '/channels').catch(() => null)]);
        fill(loadErr);
      } catch (e) {
        fill(loadErr, errorBox(e instanceof ApiError && e.status === 404 ? `Connection ${name} is closed or unknown:` : `Could not load connection ${name}:`, e));
        body.hidden = true;
        return;
      }
      body.hidden = false;
      fill(stats,
        stat('From client', byteRate(get(c, 'recv_oct_details.rate') ?? 0), { key: 'recv', accent: true }),
        stat('To client', byteRate(get(c, 'send_oct_details.rate') ?? 0), { key: 'send', accent: true }),
        stat('Channels', num(c.channels ?? 0), { key: 'channels' }),
        stat('Publish', rate(rateOf(c, 'publish') ?? 0), { key: 'publish' }),
        stat('Deliver', rate(rateOf(c, 'deliver') ?? 0), { key: 'deliver' }),
        stat('Received', bytes(c.recv_oct ?? 0), { key: 'recv_oct' }),
        stat('Sent', bytes(c.send_oct ?? 0), { key: 'send_oct' }));
      const hp = (host, port) => (host ? `${String(host).includes(':') ? `[${host}]` : host}:${port}` : '');
      fill(details, kv([
        ['Protocol', protocolView(c.protocol)],
        ['User', c.user],
        ['Virtual host', c.vhost],
        ['Client address', h('span', { class: 'mono' }, hp(c.peer_host, c.peer_port))],
        ['Server address', h('span', { class: 'mono' }, hp(c.host, c.port))],
        ['Node', c.node],
        ['Connected', c.connected_at ? h('span', { title: when(c.connected_at) }, when(c.connected_at), h('span', { class: 'muted' }, ` (${ago(c.connected_at)})`)) : ''],
        ['State', stateView(c.state)],
        ['TLS', c.ssl ? tag('TLS', 'green') : 'no'],
        ['Authentication', c.auth_mechanism],
        ['Heartbeat', c.timeout ? `${num(c.timeout)} s` : 'off'],
        c.frame_max ? ['Frame max', bytes(c.frame_max)] : null,
      ]));
      const cp = c.client_properties || {};
      fill(props, isEmptyObj(cp) ? h('span', { class: 'muted' }, 'The client sent none') : kv(Object.keys(cp).sort().map((k) => [k, propValue(cp[k])])));
      fill(chans, cs == null ? alertBox('error', 'Could not load the channels.') : table([
        { title: 'Channel', cls: 'name', render: (x) => h('span', { title: x.name }, String(x.number)) },
        { title: 'Mode', render: (x) => [x.confirm ? tag('C', 'blue', 'confirm mode') : null, x.transactional ? tag('T', 'amber', 'transactional') : null] },
        { title: 'Prefetch', num: true, render: (x) => num(x.prefetch_count) },
        { title: 'Consumers', num: true, render: (x) => num(x.consumer_count) },
        { title: 'Unacked', num: true, render: (x) => num(x.messages_unacknowledged) },
        { title: 'Unconfirmed', num: true, render: (x) => num(x.messages_unconfirmed) },
        { title: 'Publish', num: true, render: (x) => rate(rateOf(x, 'publish')) },
        { title: 'Confirm', num: true, render: (x) => rate(rateOf(x, 'confirm')) },
        { title: 'Deliver / get', num: true, render: (x) => rate(rateOf(x, 'deliver_get')) },
        { title: 'Ack', num: true, render: (x) => rate(rateOf(x, 'ack')) },
      ], Array.isArray(cs) ? cs : cs.items || [], 'No channels', null, 'connection-channels-table'));
    }
    return { el, refresh };
  }

  // Shovels page ---------------------------------------------------------
  // Dynamic shovels: their state (GET /api/shovels), a form that declares
  // one (PUT /api/parameters/shovel/{vhost}/{name}), restart (RabbitMQ's
  // DELETE /api/shovels/vhost/{vhost}/{name}/restart) and delete.
  function shovelsPage() {
    const box = h('div');
    const endFields = (end) => ({
      uri: h('input', { type: 'text', id: `shovel-${end}-uri`, value: 'amqp://', autocomplete: 'off' }),
      kind: selectEl({ id: `shovel-${end}-kind` }, [['queue', 'Queue'], ['exchange', 'Exchange']], 'queue'),
      name: h('input', { type: 'text', id: `shovel-${end}-name`, autocomplete: 'off', placeholder: end === 'src' ? 'queue or exchange' : 'empty: the message\'s own routing' }),
      key: h('input', { type: 'text', id: `shovel-${end}-key`, autocomplete: 'off', placeholder: 'routing key (exchange)' }),
    });
    const f = {
      vhost: vhostSelect({ id: 'shovel-vhost' }),
      name: h('input', { type: 'text', id: 'shovel-name', autocomplete: 'off' }),
      src: endFields('src'), dest: endFields('dest'),
      ack: selectEl({ id: 'shovel-ack-mode' }, [['on-confirm', 'On confirm'], ['on-publish', 'On publish'], ['no-ack', 'No ack']], 'on-confirm'),
      after: selectEl({ id: 'shovel-delete-after' }, [['never', 'Never'], ['queue-length', 'After the messages queued now']], 'never'),
    };
    const endRow = (e) => h('div', { class: 'row' }, e.kind, e.name, e.key);
    const form = h('form', { class: 'form', id: 'shovel-form', onsubmit: (e) => { e.preventDefault(); submit(e.submitter); } },
      h('label', null, 'Virtual host'), f.vhost,
      h('label', { for: 'shovel-name' }, 'Name'), f.name,
      h('label', { for: 'shovel-src-uri' }, 'Source URI'), h('div', null, f.src.uri, h('div', { class: 'hint' }, 'amqp:// is this broker (in the shovel\'s virtual host); amqp://user:password@host:5672/vhost another one. Several URIs: separate them with spaces.')),
      h('label', null, 'Source'), endRow(f.src),
      h('label', { for: 'shovel-dest-uri' }, 'Destination URI'), f.dest.uri,
      h('label', null, 'Destination'), endRow(f.dest),
      h('label', null, 'Acknowledgement'), f.ack,
      h('label', null, 'Delete'), f.after,
      h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: 'shovel-submit' }, 'Add shovel')));
    function endValue(prefix, e, value) {
      const uris = e.uri.value.trim().split(/\s+/).filter(Boolean);
      value[prefix + '-uri'] = uris.length === 1 ? uris[0] : uris;
      if (e.kind.value === 'queue') value[prefix + '-queue'] = e.name.value.trim();
      else {
        value[prefix + '-exchange'] = e.name.value.trim();
        if (e.key.value) value[prefix + '-exchange-key'] = e.key.value;
      }
    }
    async function submit(btn) {
      await act(btn, async () => {
        const name = f.name.value.trim();
        if (!name) throw new Error('The shovel needs a name');
        const value = { 'ack-mode': f.ack.value };
        endValue('src', f.src, value);
        endValue('dest', f.dest, value);
        if (f.after.value !== 'never') value['src-delete-after'] = f.after.value;
        await api('PUT', `/parameters/shovel/${enc(f.vhost.value)}/${enc(name)}`, { value });
        toast('ok', `Shovel ${name} added`);
        f.name.value = '';
        refresh();
      });
    }
    const endView = (uri, q, x, key) => h('div', null,
      q ? [tag('queue'), ' ', h('b', null, q)] : x != null ? [tag('exchange', 'violet'), ' ', h('b', null, exLabel(x)), key ? h('span', { class: 'muted' }, ` → ${key}`) : null] : null,
      h('div', { class: 'muted small mono', title: uri }, uri));
    // MQTT bridges (GET /api/mqtt/bridges): declared through
    // /api/parameters/mqtt-bridge or the config file's mqtt.bridges.
    const bridgeBox = h('div');
    const topicsView = (ts) => h('div', null, (ts || []).map((t) => h('div', { class: 'small mono' },
      tag(t.direction), ` ${t.local_prefix || ''}${t.pattern} ⇄ ${t.remote_prefix || ''}${t.pattern} q${t.qos}`)));
    async function refreshBridges() {
      try {
        const bs = await api('GET', prefs.vhost ? `/mqtt/bridges/${enc(prefs.vhost)}` : '/mqtt/bridges');
        fill(bridgeBox, table([
          { title: 'Name', cls: 'name', render: (b) => h('span', null, h('b', null, b.name), b.type === 'static' ? h('div', { class: 'muted small' }, 'config file') : null) },
          showVhostCol() && { title: 'Virtual host', render: (b) => b.vhost },
          { title: 'State', render: (b) => h('span', { class: 'bridge-state' }, stateView(b.state), b.reason ? h('div', { class: 'muted small wrap', title: b.reason }, b.reason) : null) },
          { title: 'Remote', render: (b) => h('div', null, h('span', { class: 'mono' }, b.address), h('div', { class: 'muted small' }, `${b.bridge_protocol_version}${b.tls ? ', TLS' : ''}, ${b.remote_clientid}`)) },
          { title: 'Topics', render: (b) => topicsView(b.topics) },
          { title: 'In', num: true, render: (b) => h('span', { class: 'bridge-in' }, num(b.messages_in ?? 0)) },
          { title: 'Out', num: true, render: (b) => h('span', { class: 'bridge-out' }, num(b.messages_out ?? 0)) },
          isCluster() && { title: 'Node', render: (b) => nodeChip(b.node) },
          { title: '', cls: 'actions', render: (b) => h('span', { class: 'row' },
            h('button', { class: 'btn secondary small', type: 'button', 'data-restart': b.name, onclick: (e) => act(e.currentTarget, async () => {
              await api('DELETE', `/mqtt/bridges/${enc(b.vhost)}/${enc(b.name)}/restart`); toast('ok', `Bridge ${b.name} restarted`); refreshBridges(); }) }, 'Restart'), ' ',
            b.type === 'static' ? null : h('button', { class: 'btn danger small', type: 'button', 'data-delete': b.name, onclick: (e) => {
              if (!confirm(`Delete bridge ${b.name}?`)) return;
              act(e.currentTarget, async () => { await api('DELETE', `/parameters/mqtt-bridge/${enc(b.vhost)}/${enc(b.name)}`); toast('ok', `Bridge ${b.name} deleted`); refreshBridges(); });
            } }, 'Delete')) },
        ].filter(Boolean), bs || [], 'No MQTT bridges', (b) => ({ 'data-bridge': b.name }), 'bridges-table'));
      } catch (e) {
        fill(bridgeBox, h('div', { style: 'padding:0 16px' }, errorBox('Could not load MQTT bridges:', e)));
      }
    }
    async function refresh() {
      refreshBridges();
      try {
        const ss = await api('GET', prefs.vhost ? `/shovels/${enc(prefs.vhost)}` : '/shovels');
        fill(box, table([
          { title: 'Name', cls: 'name', render: (s) => h('b', null, s.name) },
          showVhostCol() && { title: 'Virtual host', render: (s) => s.vhost },
          { title: 'State', render: (s) => h('span', { class: 'shovel-state' }, stateView(s.state), s.reason ? h('div', { class: 'muted small wrap', title: s.reason }, s.reason) : null) },
          { title: 'Source', render: (s) => endView(s.src_uri, s.src_queue, s.src_exchange, s.src_exchange_key) },
          { title: 'Destination', render: (s) => endView(s.dest_uri, s.dest_queue, s.dest_exchange, s.dest_exchange_key) },
          { title: 'Moved', num: true, render: (s) => h('span', { class: 'shovel-moved' }, num(s.messages_transferred ?? 0)) },
          { title: 'Since', render: (s) => (s.timestamp ? h('span', { title: s.timestamp + ' UTC' }, ago(s.timestamp.replace(' ', 'T') + 'Z')) : '') },
          isCluster() && { title: 'Node', render: (s) => nodeChip(s.node) },
          { title: '', cls: 'actions', render: (s) => h('span', { class: 'row' },
            h('button', { class: 'btn secondary small', type: 'button', 'data-restart': s.name, onclick: (e) => restart(e.currentTarget, s) }, 'Restart'), ' ',
            h('button', { class: 'btn danger small', type: 'button', 'data-delete': s.name, onclick: (e) => del(e.currentTarget, s) }, 'Delete')) },
        ].filter(Boolean), ss || [], 'No shovels', (s) => ({ 'data-shovel': s.name }), 'shovels-table'));
      } catch (e) {
        fill(box, h('div', { style: 'padding:0 16px' }, errorBox('Could not load shovels:', e)));
      }
    }
    async function restart(btn, s) {
      await act(btn, async () => { await api('DELETE', `/shovels/vhost/${enc(s.vhost)}/${enc(s.name)}/restart`); toast('ok', `Shovel ${s.name} restarted`); refresh(); });
    }
    async function del(btn, s) {
      if (!confirm(`Delete shovel ${s.name}?`)) return;
      await act(btn, async () => { await api('DELETE', `/parameters/shovel/${enc(s.vhost)}/${enc(s.name)}`); toast('ok', `Shovel ${s.name} deleted`); refresh(); });
    }
    return { el: h('div', null, pageHead('Shovels', 'Move messages from a queue or exchange to another, here or on another broker'),
      panel('Shovels', { flush: true, id: 'shovels' }, box), collapsible('Add a shovel', 'add-shovel', false, form),
      panel('MQTT bridges', { flush: true, id: 'mqtt-bridges' }, bridgeBox)), refresh };
  }

  // Cluster banner: members /api/nodes lists as not running.
  function nodesDown(nodes) { return (nodes || []).filter((n) => n.running === false).map((n) => n.name); }
  function nodesDownBanner(down) {
    return h('div', { id: 'nodes-down' }, h('span', { class: 'down' }, `${down.length === 1 ? 'A cluster node is' : `${down.length} cluster nodes are`} down: `),
      down.join(', '), '. ', h('a', { href: '#/nodes', style: 'color:#fff;text-decoration:underline' }, 'Nodes'));
  }

  // Operator policies (Admin › Operator policies) -----------------------
  function operatorPoliciesView() {
    const box = h('div');
    const form = policyForm('operator-policy', '/operator-policies', () => refresh(), true);
    async function refresh() {
      try {
        const ps = await api('GET', '/operator-policies');
        fill(box, table([
          { title: 'Virtual host', render: (p) => p.vhost },
          { title: 'Name', cls: 'name', render: (p) => h('b', null, p.name) },
          { title: 'Pattern', render: (p) => h('span', { class: 'mono' }, p.pattern) },
          { title: 'Apply to', render: (p) => p['apply-to'] },
          { title: 'Definition', render: (p) => argsView(p.definition) },
          { title: 'Priority', num: true, render: (p) => String(p.priority) },
          { title: '', cls: 'actions', render: (p) => h('span', { class: 'row' }, h('button', { class: 'btn secondary small', type: 'button', 'data-edit': p.name, onclick: () => form.edit(p) }, 'Edit'), ' ',
            h('button', { class: 'btn danger small', type: 'button', 'data-delete': p.name, onclick: (e) => del(e.target, p) }, 'Delete')) },
        ], ps || [], 'No operator policies', (p) => ({ 'data-policy': p.name }), 'operator-policies-table'));
      } catch (e) {
        fill(box, h('div', { style: 'padding:0 16px' }, errorBox('Could not load operator policies:', e)));
      }
    }
    async function del(btn, p) {
      if (!confirm(`Delete operator policy ${p.name}?`)) return;
      await act(btn, async () => { await api('DELETE', `/operator-policies/${enc(p.vhost)}/${enc(p.name)}`); toast('ok', `Operator policy ${p.name} deleted`); refresh(); });
    }
    return { el: h('div', null, panel('Operator policies', { flush: true, id: 'operator-policies', right: h('span', { class: 'muted small' }, 'caps on queues that applications and their policies cannot lift') }, box), form.el), refresh };
  }

  // Policy form (Admin › Policies) ---------------------------------------
  // Adds or replaces a policy with PUT {path}/{vhost}/{name}; edit(p)
  // loads an existing one into it. The definition is key = value lines.
  function policyForm(prefix, path, onSaved, operator) {
    const f = {
      vhost: vhostSelect({ id: `${prefix}-vhost` }),
      name: h('input', { type: 'text', id: `${prefix}-name`, autocomplete: 'off' }),
      pattern: h('input', { type: 'text', id: `${prefix}-pattern`, autocomplete: 'off', placeholder: '^orders\\.' }),
      applyTo: selectEl({ id: `${prefix}-apply-to` }, operator ? [['queues', 'Queues']] : [['all', 'Exchanges and queues'], ['queues', 'Queues'], ['exchanges', 'Exchanges']], operator ? 'queues' : 'all'),
      priority: h('input', { type: 'number', id: `${prefix}-priority`, value: '0', style: 'width:90px' }),
      def: h('textarea', { id: `${prefix}-definition`, class: 'def', rows: 4, placeholder: 'max-length = 10000\noverflow = reject-publish' }),
    };
    const hint = (k, v) => h('a', { href: '#', onclick: (e) => { e.preventDefault(); f.def.value += (f.def.value && !f.def.value.endsWith('\n') ? '\n' : '') + `${k} = ${v}`; f.def.focus(); } }, k);
    const hints = operator
      ? [['max-length', 100000], ['max-length-bytes', 1000000000], ['message-ttl', 86400000], ['expires', 86400000], ['delivery-limit', 20]]
      : [['max-length', 10000], ['max-length-bytes', 1000000000], ['message-ttl', 60000], ['expires', 1800000], ['overflow', 'reject-publish'],
        ['dead-letter-exchange', 'dlx'], ['delivery-limit', 20], ['alternate-exchange', 'ae']];
    const el = collapsible(operator ? 'Add / update an operator policy' : 'Add / update a policy', `add-${prefix}`, false, h('form', { class: 'form', id: `${prefix}-form`, onsubmit: (e) => { e.preventDefault(); submit(e.submitter); } },
      h('label', null, 'Virtual host'), f.vhost,
      h('label', { for: `${prefix}-name` }, 'Name'), f.name,
      h('label', { for: `${prefix}-pattern` }, 'Pattern'), h('div', null, f.pattern, h('div', { class: 'hint' }, 'A regular expression matched against queue and exchange names.')),
      h('label', null, 'Apply to'), f.applyTo,
      h('label', null, 'Priority'), f.priority,
      h('label', { for: `${prefix}-definition` }, 'Definition'), h('div', null, f.def, h('div', { class: 'hint' }, operator ? 'Limits only; a queue gets the lower of its own value and this one. Add: ' : 'One key = value per line. Add: ',
        hints.map(([k, v]) => hint(k, v)))),
      h('div', { class: 'form-actions' }, h('button', { class: 'btn', type: 'submit', id: `${prefix}-submit` }, 'Save policy'))));
    async function submit(btn) {
      await act(btn, async () => {
        const name = f.name.value.trim();
        if (!name) throw new Error('The policy needs a name');
        const definition = parseKV(f.def.value);
        if (isEmptyObj(definition)) throw new Error('The definition is empty');
        await api('PUT', `${path}/${enc(f.vhost.value)}/${enc(name)}`, { pattern: f.pattern.value, 'apply-to': f.applyTo.value, priority: +f.priority.value || 0, definition });
        toast('ok', `Policy ${name} saved`);
        onSaved();
      });
    }
    return {
      el,
      edit(p) {
        f.vhost.value = p.vhost; f.name.value = p.name; f.pattern.value = p.pattern;
        f.applyTo.value = p['apply-to'] || 'all'; f.priority.value = String(p.priority || 0);
        f.def.value = Object.entries(p.definition || {}).map(([k, v]) => `${k} = ${jsonText(v)}`).join('\n');
        el.open = true;
        el.scrollIntoView({ block: 'start' });
      },
    };
  }

  // ----------------------------------------------------------------- router
  let current = null;
  let timer = null;
  let navToken = 0;

  function route() {
    const parts = location.hash.replace(/^#\/?/, '').split('/').map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
    const [a, b, c] = parts;
    switch (a) {
      case '': case undefined: case 'overview': return ['overview', overviewPage()];
      case 'connections': return ['connections', b ? connectionPage(parts.slice(1).join('/')) : connectionsPage()];
      case 'channels': return ['channels', channelsPage()];
      case 'exchanges': return ['exchanges', b !== undefined && c !== undefined ? exchangePage(b, c) : exchangesPage()];
      case 'queues': return ['queues', b !== undefined && c !== undefined ? queuePage(b, parts.slice(2).join('/')) : queuesPage()];
      case 'admin': return ['admin', adminPage(b)];
      case 'nodes': return ['nodes', nodesPage()];
      case 'mqtt': return ['mqtt', mqttPage(b, c, parts.slice(3).join('/'))]; // MQTT section
      case 'shovels': return ['shovels', shovelsPage()];
      default: return ['overview', overviewPage()];
    }
  }

  // Resource alarms (memory, disk) block publishers: say so on every page.
  async function checkAlarms() {
    let nodes;
    try { nodes = await loadNodes(); } catch (_) { return; } // not every user may read nodes
    const raised = [];
    for (const n of nodes || []) {
      if (n.mem_alarm) raised.push(`memory alarm on ${n.name}`);
      if (n.disk_free_alarm) raised.push(`disk alarm on ${n.name}`);
    }
    const box = $('#alarms');
    const down = nodesDown(nodes);
    if (!raised.length && !down.length) { box.hidden = true; return; }
    fill(box, raised.length ? h('div', null, `Resource alarm: ${raised.join(', ')} — publishers are blocked until it clears.`) : null, down.length ? nodesDownBanner(down) : null);
    box.hidden = false;
  }

  async function tick() {
    const my = navToken;
    checkAlarms();
    try { await sampleOverview(); } catch (_) { /* pages show their own errors */ }
    if (current && my === navToken) await current.refresh();
  }
  function schedule() {
    clearInterval(timer);
    if (prefs.refresh > 0) timer = setInterval(tick, prefs.refresh * 1000);
  }
  function render() {
    if (!authHeader()) { showLogin(); return; }
    navToken++;
    const [nav, page] = route();
    current = page;
    document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.nav === nav));
    fill($('#view'), page.el);
    const title = { overview: 'Overview', connections: 'Connections', channels: 'Channels', exchanges: 'Exchanges', queues: 'Queues', admin: 'Admin', nodes: 'Nodes', mqtt: 'MQTT', shovels: 'Shovels' }[nav];
    document.title = `${title} · Trident`;
    if (nav === 'overview' && !lastOverview) tick(); else { page.refresh(); checkAlarms(); }
    window.scrollTo(0, 0);
  }
  function showLogin(message) {
    clearInterval(timer);
    current = null;
    document.body.classList.add('login');
    $('#topbar').hidden = true; $('#footer').hidden = true;
    fill($('#view'), loginPage(message));
    document.title = 'Log in · Trident';
  }
  function logout(message) {
    sessionStorage.removeItem(AUTH_KEY);
    sessionStorage.removeItem(USER_KEY);
    samples.length = 0; seeded = false; lastOverview = null;
    showLogin(message);
  }
  async function start() {
    document.body.classList.remove('login');
    $('#topbar').hidden = false; $('#footer').hidden = false;
    const me = JSON.parse(sessionStorage.getItem(USER_KEY) || '{}');
    const tags = Array.isArray(me.tags) ? me.tags : String(me.tags || '').split(',').filter(Boolean);
    fill($('#whoami'), 'User ', h('b', null, me.name || ''), tags.map((t) => tag(t, 'blue')));
    $('#refresh-select').value = String(prefs.refresh);
    fill($('#view'), h('div', { class: 'loading' }, 'Loading…'));
    await Promise.all([loadVhosts(), loadNodes().catch(() => null)]);
    try { await sampleOverview(); } catch (e) { /* shown by the page */ }
    render();
    schedule();
  }

  window.addEventListener('hashchange', () => { if (authHeader()) render(); });
  $('#logout').addEventListener('click', () => logout());
  $('#vhost-select').addEventListener('change', (e) => { prefs.vhost = e.target.value; savePrefs(); render(); });
  $('#refresh-select').addEventListener('change', (e) => { prefs.refresh = +e.target.value; savePrefs(); schedule(); });
  oauthCallback().then((handled) => {
    if (handled) return;
    if (authHeader()) start(); else showLogin();
  });
})();
