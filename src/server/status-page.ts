/**
 * The status page (`GET /` and `GET /status`): one self-contained HTML document, no build step, no CDN, no
 * external fonts. It polls `GET /v1/status` (src/server/status.ts) every 2 s and draws per-policy rates as
 * inline SVG. Every value from the server is written with textContent or as a numeric SVG attribute: nothing
 * of the data ever goes through innerHTML. The page is served with a Content-Security-Policy allowing only
 * its own inline script and style (by hash) and requests to its own origin.
 *
 * Behind the admin API's token, the page itself carries no data and is served without the token; it asks for
 * the token once (or takes it from the URL fragment, `/#token=T`, which is never sent to the server) and keeps
 * it in sessionStorage, sending it as `Authorization: Bearer` to `/v1/status`.
 */
import { createHash } from 'node:crypto';

const STYLE = `
:root { color-scheme: light dark; --fg: #1d232a; --muted: #5b6570; --bg: #f6f7f9; --card: #fff; --line: #d9dde3;
  --ok: #2f8f46; --deny: #c8372d; --degr: #d98a00; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e9ed; --muted: #9aa4ae; --bg: #14171b; --card: #1d2127; --line: #343a42; } }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: 16px; align-items: baseline; padding: 12px 20px; border-bottom: 1px solid var(--line); background: var(--card); }
header h1 { font-size: 18px; margin: 0; }
main { padding: 16px 20px; display: grid; gap: 16px; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); align-items: start; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 12px 14px; }
h2 { font-size: 15px; margin: 0 0 6px; }
.muted { color: var(--muted); }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 2px 6px; border-bottom: 1px solid var(--line); font-variant-numeric: tabular-nums; }
td.n, th.n { text-align: right; white-space: nowrap; }
.key { font-family: ui-monospace, Menlo, monospace; word-break: break-all; }
svg.chart { width: 100%; height: 90px; display: block; }
.legend span { margin-right: 12px; }
.ok { color: var(--ok); } .deny { color: var(--deny); } .degr { color: var(--degr); }
.bad { color: var(--deny); font-weight: 600; }
#auth { display: none; padding: 12px 20px; }
#error { color: var(--deny); }
`;

// Plain ES2017 in a string: no template literals inside (they would end this one).
const SCRIPT = `
'use strict';
(function () {
  var SVGNS = 'http://www.w3.org/2000/svg';
  var KEY = 'sluice.status.token';
  var m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  function $(id) { return document.getElementById(id); }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
  function fmt(n) { return typeof n === 'number' ? (Math.round(n * 10) / 10).toLocaleString('en-US') : '-'; }
  function sum(a, from) { var s = 0; for (var i = from || 0; i < a.length; i++) s += a[i]; return s; }
  function kv(parent, k, v, cls) { parent.appendChild(el('span', k, 'muted')); parent.appendChild(el('span', v, cls)); }

  /** A line chart of per-second series (admitted, denied, degraded) as inline SVG, scaled to the largest value. */
  function chart(series, total) {
    var w = 400, h = 90, pad = 2;
    var svg = document.createElementNS(SVGNS, 'svg');
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.setAttribute('class', 'chart');
    svg.setAttribute('data-total', String(total));
    var max = 1;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    var grid = document.createElementNS(SVGNS, 'line');
    grid.setAttribute('x1', '0'); grid.setAttribute('x2', String(w));
    grid.setAttribute('y1', String(h - pad)); grid.setAttribute('y2', String(h - pad));
    grid.setAttribute('stroke', 'currentColor'); grid.setAttribute('stroke-opacity', '0.2');
    svg.appendChild(grid);
    series.forEach(function (s) {
      var n = s.values.length, pts = [];
      for (var i = 0; i < n; i++) {
        var x = n < 2 ? 0 : (i * w) / (n - 1);
        var y = h - pad - ((h - 2 * pad) * s.values[i]) / max;
        pts.push(x.toFixed(1) + ',' + y.toFixed(1));
      }
      var line = document.createElementNS(SVGNS, 'polyline');
      line.setAttribute('points', pts.join(' '));
      line.setAttribute('fill', 'none');
      line.setAttribute('stroke', s.color);
      line.setAttribute('stroke-width', '1.5');
      line.setAttribute('vector-effect', 'non-scaling-stroke');
      line.setAttribute('data-series', s.name);
      svg.appendChild(line);
    });
    var title = document.createElementNS(SVGNS, 'title');
    title.textContent = 'max ' + max + ' checks/s';
    svg.appendChild(title);
    return svg;
  }

  function limitsText(p) {
    return p.limits.map(function (l) { return l.algorithm + ' ' + l.limit + '/' + (l.periodMs / 1000) + 's burst ' + l.burst; }).join(' + ');
  }

  /** The last n entries of a series (the chart shows the seconds since start, at least a minute). */
  function last(a, n) { return a.length > n ? a.slice(a.length - n) : a; }

  function policyCard(p, act, hot, shown) {
    var s = el('section');
    s.setAttribute('data-policy', p.name);
    s.appendChild(el('h2', p.name));
    s.appendChild(el('div', limitsText(p) + ' | ' + p.consistency + (p.shadow ? ' | shadow' : '') +
      (p.descriptors.length ? ' | descriptors ' + p.descriptors.join(', ') : ''), 'muted'));
    if (act) {
      var recent = 10, n = act.admitted.length;
      var legend = el('div', null, 'legend');
      legend.appendChild(el('span', 'admitted ' + fmt(sum(act.admitted, n - recent) / recent) + '/s', 'ok'));
      legend.appendChild(el('span', 'denied ' + fmt(sum(act.denied, n - recent) / recent) + '/s', 'deny'));
      legend.appendChild(el('span', 'degraded ' + fmt(sum(act.degraded, n - recent) / recent) + '/s', 'degr'));
      legend.appendChild(el('span', '(last 10 s; chart: checks/s over the last ' + Math.min(shown, n) + ' s)', 'muted'));
      s.appendChild(legend);
      // data-total: every check in the ring (admitted + denied), shown or not
      s.appendChild(chart([
        { name: 'admitted', values: last(act.admitted, shown), color: '#2f8f46' },
        { name: 'denied', values: last(act.denied, shown), color: '#c8372d' },
        { name: 'degraded', values: last(act.degraded, shown), color: '#d98a00' },
      ], sum(act.admitted) + sum(act.denied)));
      var totals = el('div', null, 'kv');
      kv(totals, 'checks since start', fmt(act.checks));
      kv(totals, 'denied since start', fmt(act.deniedTotal));
      kv(totals, 'near limit (< 20 % left)', fmt(act.nearLimit));
      s.appendChild(totals);
    } else {
      s.appendChild(el('div', 'no checks yet', 'muted'));
    }
    if (hot && hot.top.length) {
      var t = el('table');
      var head = el('tr');
      ['hot key', 'checks', 'denied', 'share'].forEach(function (c, i) { head.appendChild(el('th', c, i ? 'n' : '')); });
      t.appendChild(head);
      hot.top.forEach(function (k) {
        var r = el('tr');
        r.appendChild(el('td', k.key, 'key'));
        r.appendChild(el('td', fmt(k.checks), 'n'));
        r.appendChild(el('td', fmt(k.denied), 'n'));
        r.appendChild(el('td', (k.share * 100).toFixed(1) + ' %', 'n'));
        t.appendChild(r);
      });
      s.appendChild(t);
      s.appendChild(el('div', 'counts overstate by at most ' + fmt(hot.errorBound) + ' (of ' + fmt(hot.checks) + ' checks)', 'muted'));
    }
    return s;
  }

  function render(d) {
    $('version').textContent = 'policies ' + d.policiesVersion;
    $('updated').textContent = 'updated ' + new Date(d.now).toLocaleTimeString() + ', up ' + d.uptimeSeconds + ' s';
    var main = $('main');
    clear(main);
    var sys = el('section');
    sys.setAttribute('id', 'system');
    sys.appendChild(el('h2', 'instance'));
    var g = el('div', null, 'kv');
    if (d.store) {
      kv(g, 'store', d.store.status, d.store.status === 'connected' ? 'ok' : 'bad');
      kv(g, 'breaker', d.store.breaker || '-', d.store.breaker === 'closed' ? '' : 'bad');
      var lat = d.store.latency;
      kv(g, 'store latency', lat && lat.calls ? 'mean ' + fmt(lat.meanMs) + ' ms, p50 <= ' + fmt(lat.p50Ms) + ' ms, p99 <= ' + fmt(lat.p99Ms) + ' ms (' + fmt(lat.calls) + ' calls)' : '-');
      kv(g, 'store errors', fmt(d.store.errors) + ' (timeouts ' + fmt(d.store.timeouts) + ', connection ' + fmt(d.store.connectionErrors) + ', script ' + fmt(d.store.scriptErrors) + ')');
    } else {
      kv(g, 'store', 'none (local only)');
    }
    if (d.sync) {
      kv(g, 'sync lag', fmt(d.sync.lagMs) + ' ms', d.sync.lagMs > 5000 ? 'bad' : '');
      kv(g, 'sync', fmt(d.sync.merges) + ' merges, ' + fmt(d.sync.failures) + ' failed, ' + fmt(d.sync.pendingKeys) + ' keys pending, ' + fmt(d.sync.dropped) + ' dropped');
    }
    if (d.engine) {
      kv(g, 'keys held', fmt(d.engine.keys) + ' (' + fmt(d.engine.evictions) + ' evicted)');
      kv(g, 'pending checks', fmt(d.engine.pending));
      var up = d.engine.perShard.filter(function (s) { return s.up; }).length;
      kv(g, 'shards', d.engine.shards === 0 ? 'none (in-thread)' : up + ' of ' + d.engine.shards + ' up', up < d.engine.perShard.length ? 'bad' : '');
    }
    sys.appendChild(g);
    if (d.engine && d.engine.perShard.length) {
      var t = el('table');
      var head = el('tr');
      ['shard', 'state', 'queued', 'downs', 'recoveries'].forEach(function (c, i) { head.appendChild(el('th', c, i > 1 ? 'n' : '')); });
      t.appendChild(head);
      d.engine.perShard.forEach(function (s, i) {
        var r = el('tr');
        r.appendChild(el('td', i));
        r.appendChild(el('td', s.up ? 'up' : 'down', s.up ? 'ok' : 'bad'));
        r.appendChild(el('td', fmt(s.queuedChecks), 'n'));
        r.appendChild(el('td', fmt(s.downs), 'n'));
        r.appendChild(el('td', fmt(s.recoveries), 'n'));
        t.appendChild(r);
      });
      sys.appendChild(t);
    }
    main.appendChild(sys);
    var acts = d.activity ? d.activity.policies : {};
    var shown = Math.max(60, d.uptimeSeconds + 1);
    d.policies.forEach(function (p) { main.appendChild(policyCard(p, acts[p.name], d.hot[p.name], shown)); });
  }

  var timer = null;
  function poll() {
    var token = sessionStorage.getItem(KEY);
    var headers = token ? { Authorization: 'Bearer ' + token } : {};
    fetch('/v1/status', { headers: headers, cache: 'no-store' }).then(function (r) {
      if (r.status === 401) {
        $('auth').style.display = 'block';
        $('error').textContent = token ? 'the token was refused' : '';
        return null;
      }
      if (!r.ok) throw Error('GET /v1/status: ' + r.status);
      $('auth').style.display = 'none';
      return r.json();
    }).then(function (d) {
      if (d) { render(d); $('error').textContent = ''; }
      timer = setTimeout(poll, 2000);
    }, function (e) {
      $('error').textContent = String(e && e.message ? e.message : e);
      timer = setTimeout(poll, 5000);
    });
  }
  $('auth').addEventListener('submit', function (ev) {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $('token').value);
    $('token').value = '';
    clearTimeout(timer);
    poll();
  });
  poll();
})();
`;

const hash = (text: string): string => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/** The page's HTML. */
export const STATUS_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice status</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body>
<header><h1>sluice</h1><span id="version" class="muted"></span><span id="updated" class="muted"></span><span id="error"></span></header>
<form id="auth"><label>Admin token <input id="token" type="password" autocomplete="off"></label> <button type="submit">Show status</button>
<span class="muted">kept in this tab's sessionStorage only</span></form>
<main id="main"><section class="muted">loading...</section></main>
<script>${SCRIPT}</script>
</body>
</html>
`;

/** The page's media type. */
export const STATUS_PAGE_TYPE = 'text/html; charset=utf-8';

/** Headers the page is served with besides its type and `Cache-Control: no-store`: a CSP allowing only its own script and style. */
export const STATUS_PAGE_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy': `default-src 'none'; script-src ${hash(SCRIPT)}; style-src ${hash(STYLE)}; connect-src 'self'; img-src data:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'`,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
};
