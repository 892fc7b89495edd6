
'use strict';
(() => {
  // The routes sit beside the page: at / it calls /slots/..., under PATH_PREFIX (the page at
  // /api) it calls /api/slots/...
  const BASE = location.pathname.replace(/\/+$/, '');
  // The holds this tab placed, kept across reloads of the tab.
  const HOLDS_KEY = 'slot-booking.holds:' + BASE;
  // At most four listings a second, however many changes come.
  const REFRESH_GAP_MS = 250;
  // While the change stream is down the listing is read this often instead.
  const POLL_MS = 5000;
  // A stream the browser gave up on (the server refused it) is opened anew after this.
  const REOPEN_MS = 3000;
  // A stream that has not opened by then: the listing is read anyway.
  const FIRST_READ_MS = 2000;
  // The listing is read once more this long after the last change.
  const SETTLE_MS = 1000;
  // A held hold this close to its end shows its countdown in red.
  const URGENT_SECONDS = 60;

  // What each problem `code` of the server means to the person at the page.
  const READABLE = {
    sold_out: 'Not enough units are free in this slot for that many. Try fewer units or another slot.',
    slot_closed: 'This slot takes no more holds: it has started, or its sales are closed.',
    slot_not_found: 'This slot no longer exists.',
    quantity_exceeds_capacity: 'This slot does not have that many units in all. Try fewer units.',
    invalid_quantity: 'The number of units must be a whole number from 1 to 1000.',
    hold_expired: 'This hold has expired and its units went back on sale. Place a new hold.',
    hold_not_found: 'The server does not know this hold (any more).',
    hold_cancelled: 'This hold was cancelled.',
    idempotency_key_reused: 'The server had already used this request’s key for another hold. Please try again.',
    idempotency_key_required: 'The server asked for an Idempotency-Key that the page did not send.',
    invalid_idempotency_key: 'The server did not accept the page’s request key.',
    invalid_lifetime: 'The server does not allow holds of that length.',
    invalid_owner: 'The server did not accept the owner id sent with the request.',
    owner_required: 'The server asked for an owner id that the page did not send.',
    invalid_query: 'The server could not read the page’s request.',
    invalid_page: 'The server could not read the page’s request.',
    invalid_body: 'The server could not read the page’s request.',
    body_timeout: 'The request took too long to reach the server. Please try again.',
    payload_too_large: 'The request was too large for the server.',
    uri_too_long: 'The request’s address was too long for the server.',
    headers_too_large: 'The request’s headers were too large for the server.',
    not_found: 'The server has no such route. Is this page served by a matching server?',
    method_not_allowed: 'The server does not allow that request here.',
    unauthorized: 'The server asks for authorization.',
    store_unavailable: 'The booking store is briefly unavailable. Please try again in a moment.',
    store_failed: 'The booking store failed; the server’s log has the details.',
    internal_error: 'The server ran into an error of its own; its log has the details.',
    network: 'The server cannot be reached. Is it running? Please try again.',
  };

  const $ = (id) => document.getElementById(id);

  // An element with properties (dataset entries under `data`, attributes under `attrs`) and
  // children.
  function el(tag, props, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === 'data') Object.assign(node.dataset, value);
      else if (key === 'attrs') for (const [name, text] of Object.entries(value)) node.setAttribute(name, text);
      else node[key] = value;
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  // ---- Time -------------------------------------------------------------------------------

  // The server's clock minus this browser's, when they clearly differ (from the `Date` header).
  let skewMs = 0;
  const now = () => Date.now() + skewMs;

  function noteServerDate(response, sentAt) {
    const server = Date.parse(response.headers.get('Date') || '');
    if (Number.isNaN(server)) return;
    // The header is to the second: its middle is the best guess.
    const skew = server + 500 - (sentAt + Date.now()) / 2;
    skewMs = Math.abs(skew) > 2000 ? skew : 0;
  }

  // The server writes microseconds; Date reads milliseconds.
  const parseTime = (text) => new Date(String(text).replace(/(\.\d{3})\d+/, '$1'));

  const timeFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });

  function dayOf(date) {
    const options = { weekday: 'short', day: 'numeric', month: 'short' };
    if (date.getFullYear() !== new Date(now()).getFullYear()) options.year = 'numeric';
    return new Intl.DateTimeFormat(undefined, options).format(date);
  }

  // "Sat, 1 Jun" and "09:00–10:00" (the end's day too when it is another).
  function slotTimes(slot) {
    const start = parseTime(slot.starts_at);
    const end = parseTime(slot.ends_at);
    let hours = `${timeFormat.format(start)}–${timeFormat.format(end)}`;
    if (end.toDateString() !== start.toDateString()) {
      hours = `${timeFormat.format(start)} – ${dayOf(end)} ${timeFormat.format(end)}`;
    }
    return { day: dayOf(start), hours };
  }

  function slotLabel(slot) {
    if (!slot) return 'this slot';
    const { day, hours } = slotTimes(slot);
    return `${day} ${hours}`;
  }

  // 75 → "1:15", 3725 → "1:02:05".
  function clock(seconds) {
    const s = Math.max(0, seconds);
    const two = (n) => String(n).padStart(2, '0');
    const hours = Math.floor(s / 3600);
    const minutes = Math.floor((s % 3600) / 60);
    return hours > 0 ? `${hours}:${two(minutes)}:${two(s % 60)}` : `${minutes}:${two(s % 60)}`;
  }

  const units = (n) => `${n} unit${n === 1 ? '' : 's'}`;

  // ---- Talking to the server ------------------------------------------------------------

  // A fresh Idempotency-Key for each hold the person asks for (crypto.randomUUID needs a
  // secure context; getRandomValues does not).
  function freshKey() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return 'page-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  // One request: `{ok, status, data, headers}` or `{ok: false, problem: {code, detail, status}}`.
  async function call(method, path, { json, headers } = {}) {
    const init = { method, cache: 'no-store', headers: { Accept: 'application/json', ...headers } };
    if (json !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(json);
    }
    const sentAt = Date.now();
    let response;
    let text;
    try {
      response = await fetch(BASE + path, init);
      text = await response.text();
    } catch (error) {
      return { ok: false, status: 0, problem: { code: 'network', detail: '', status: 0 } };
    }
    noteServerDate(response, sentAt);
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (error) {
      data = null;
    }
    if (response.ok) return { ok: true, status: response.status, data, headers: response.headers };
    const problem = { code: '', detail: '', status: response.status, statusText: response.statusText };
    if (data && typeof data === 'object') {
      if (typeof data.code === 'string') problem.code = data.code;
      if (typeof data.detail === 'string') problem.detail = data.detail;
    }
    return { ok: false, status: response.status, problem };
  }

  // A problem as a sentence: by its code, else the server's own detail, else the status.
  function readable(problem) {
    if (Object.hasOwn(READABLE, problem.code)) return READABLE[problem.code];
    if (problem.detail) return problem.detail.charAt(0).toUpperCase() + problem.detail.slice(1) + '.';
    return `The server answered ${problem.status} ${problem.statusText || ''}`.trim() + '.';
  }

  // ---- The message line -------------------------------------------------------------------

  function show(kind, text, code) {
    const box = $('message');
    box.dataset.kind = kind;
    box.dataset.code = code || '';
    $('message-text').textContent = text;
    box.hidden = false;
  }

  function fail(what, problem) {
    show('error', `${what}: ${readable(problem)}`, problem.code || `http_${problem.status}`);
  }

  $('message-close').addEventListener('click', () => {
    $('message').hidden = true;
  });

  // ---- Slots ------------------------------------------------------------------------------

  const slots = new Map(); // slot id → the listing's entry
  const rows = new Map(); // slot id → its <tr>
  // `failing`: the message shown when a read failed, until one succeeds.
  const listing = { busy: false, wanted: false, lastAt: -Infinity, timer: null, failing: false, read: false };

  // Reads the listing now, or as soon as the last read is REFRESH_GAP_MS old and done.
  function refreshSoon() {
    listing.wanted = true;
    if (listing.busy || listing.timer !== null) return;
    const wait = Math.max(0, listing.lastAt + REFRESH_GAP_MS - performance.now());
    listing.timer = setTimeout(() => {
      listing.timer = null;
      readSlots();
    }, wait);
  }

  async function readSlots() {
    listing.wanted = false;
    listing.busy = true;
    listing.lastAt = performance.now();
    const from = new Date(now()).toISOString();
    const answer = await call('GET', '/slots/availability?from=' + encodeURIComponent(from));
    listing.busy = false;
    if (answer.ok && answer.data && Array.isArray(answer.data.slots)) {
      if (listing.failing && $('message-text').textContent === listing.failing) $('message').hidden = true;
      listing.failing = false;
      const more = /rel="?next"?/.test(answer.headers.get('Link') || '');
      showSlots(answer.data.slots, more);
    } else if (!listing.failing) {
      // Said once, not at every retry; taken back once a read succeeds.
      fail('Could not read the slots', answer.ok ? { code: '', detail: '', status: answer.status } : answer.problem);
      listing.failing = $('message-text').textContent;
    }
    if (listing.wanted) refreshSoon();
  }

  function slotRow(slot) {
    const id = String(slot.slot_id);
    const quantity = el('input', {
      className: 'quantity',
      type: 'number',
      min: 1,
      max: 1000,
      step: 1,
      value: 1,
      attrs: { 'aria-label': 'Units to hold' },
    });
    const hold = el('button', { type: 'button', textContent: 'Hold', data: { action: 'hold' } });
    return el('tr', { data: { slotId: id } }, [
      el('td', { className: 'when' }, [el('span', { className: 'day' }), el('span', { className: 'hours' }), el('span', { className: 'resource' })]),
      el('td', { className: 'free' }, [el('span', { className: 'free-text' }), el('span', { className: 'bar' }, [el('span')])]),
      el('td', {}, [quantity]),
      el('td', {}, [hold]),
    ]);
  }

  function fillRow(row, slot) {
    const { day, hours } = slotTimes(slot);
    row.querySelector('.day').textContent = day;
    row.querySelector('.hours').textContent = hours;
    row.querySelector('.resource').textContent = slot.resource ? `· ${slot.resource}` : '';
    const remaining = Number(slot.remaining);
    const capacity = Number(slot.capacity);
    const before = row.dataset.remaining;
    row.dataset.remaining = String(remaining);
    row.dataset.capacity = String(capacity);
    row.dataset.full = String(remaining <= 0);
    row.querySelector('.free-text').textContent = remaining <= 0 ? `Full (${capacity} in all)` : `${remaining} of ${capacity} free`;
    row.querySelector('.bar > span').style.width = `${capacity > 0 ? (100 * Math.max(0, remaining)) / capacity : 0}%`;
    if (before !== undefined && before !== String(remaining)) {
      // Flash the number that changed (restarting the animation).
      row.classList.remove('changed');
      void row.offsetWidth;
      row.classList.add('changed');
    }
  }

  function showSlots(entries, more) {
    const body = $('slot-rows');
    const listed = new Set(entries.map((slot) => String(slot.slot_id)));
    for (const [id, row] of rows) {
      if (!listed.has(id)) {
        row.remove();
        rows.delete(id);
      }
    }
    entries.forEach((slot, index) => {
      const id = String(slot.slot_id);
      slots.set(id, slot);
      let row = rows.get(id);
      if (!row) {
        row = slotRow(slot);
        rows.set(id, row);
      }
      fillRow(row, slot);
      // Moved only when out of place, so a field being typed in keeps its focus.
      if (body.children[index] !== row) body.insertBefore(row, body.children[index] || null);
    });
    $('slots-empty').hidden = entries.length > 0;
    $('slots-more').hidden = !more;
    listing.read = true;
    document.body.dataset.slotsRead = String(Number(document.body.dataset.slotsRead || 0) + 1);
  }

  $('slot-rows').addEventListener('click', (event) => {
    const button = event.target.closest('button[data-action="hold"]');
    if (button) placeHold(button.closest('tr'), button);
  });

  $('slot-rows').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && event.target.matches('input.quantity')) {
      const row = event.target.closest('tr');
      placeHold(row, row.querySelector('button[data-action="hold"]'));
    }
  });

  async function placeHold(row, button) {
    const slotId = row.dataset.slotId;
    const slot = slots.get(slotId);
    const typed = row.querySelector('input.quantity').value.trim();
    const quantity = Number(typed);
    const what = `Could not hold ${Number.isInteger(quantity) ? units(quantity) : 'units'} of ${slotLabel(slot)}`;
    if (typed === '' || !Number.isInteger(quantity)) {
      // Not a whole number: the server would refuse it as this.
      fail(what, { code: 'invalid_quantity', detail: '', status: 400 });
      return;
    }
    button.disabled = true;
    const answer = await call('POST', `/slots/${encodeURIComponent(slotId)}/hold`, {
      json: { quantity },
      headers: { 'Idempotency-Key': freshKey() },
    });
    button.disabled = false;
    if (!answer.ok) {
      fail(what, answer.problem);
      refreshSoon();
      return;
    }
    keep(answer.data, { quantity, slot: slot && { starts_at: slot.starts_at, ends_at: slot.ends_at } });
    show('info', `Held ${units(quantity)} of ${slotLabel(slot)}. Confirm it before the time runs out.`);
    refreshSoon();
  }

  // ---- Holds ------------------------------------------------------------------------------

  const holds = new Map(); // hold id → {hold, quantity, slot, node}

  function save() {
    const kept = [...holds.values()].map(({ hold, quantity, slot }) => ({ hold, quantity, slot }));
    try {
      sessionStorage.setItem(HOLDS_KEY, JSON.stringify(kept));
    } catch (error) {
      // Storage full or refused: the holds are still shown, just not kept across a reload.
    }
  }

  // Shows `hold` (a hold body from the server), added or updated, and keeps it for a reload.
  function keep(hold, extra) {
    const id = String(hold.hold_id);
    let record = holds.get(id);
    if (!record) {
      record = { hold, quantity: extra.quantity, slot: extra.slot, node: null };
      holds.set(id, record);
    }
    record.hold = hold;
    if (hold.status === 'cancelled') {
      forget(id);
      return;
    }
    if (!record.node) {
      record.node = holdNode(id);
      $('holds').prepend(record.node);
    }
    fillHold(record);
    $('holds-empty').hidden = true;
    save();
  }

  function forget(id) {
    const record = holds.get(id);
    if (record && record.node) record.node.remove();
    holds.delete(id);
    $('holds-empty').hidden = holds.size > 0;
    save();
  }

  function holdNode(id) {
    const button = (action, text, className) => el('button', { type: 'button', className: className || '', textContent: text, data: { action } });
    return el('li', { className: 'hold', data: { holdId: id } }, [
      el('div', { className: 'hold-what' }, [
        el('span', { className: 'hold-title' }, [el('span', { className: 'badge' }), el('span', { className: 'hold-slot' })]),
        el('span', { className: 'hold-state' }, [el('span', { className: 'countdown' })]),
      ]),
      el('div', { className: 'hold-actions' }, [
        button('confirm', 'Confirm'),
        button('renew', 'Renew', 'secondary'),
        button('cancel', 'Cancel', 'danger'),
        button('dismiss', 'Dismiss', 'secondary'),
      ]),
    ]);
  }

  // The status shown: the server's, or `expired` once a held hold's time has run out here.
  function shownStatus(record) {
    const { hold } = record;
    if (hold.status === 'held' && parseTime(hold.expires_at).getTime() <= now()) return 'expired';
    return hold.status;
  }

  function fillHold(record) {
    const { hold, node } = record;
    const status = shownStatus(record);
    node.dataset.slotId = String(hold.slot_id);
    node.dataset.status = status;
    node.dataset.expiresAt = hold.expires_at;
    node.dataset.quantity = String(record.quantity || '');
    node.querySelector('.badge').textContent = status;
    const amount = record.quantity ? units(record.quantity) : 'Units';
    node.querySelector('.hold-slot').textContent = `${amount} · ${record.slot ? slotLabel(record.slot) : `slot ${hold.slot_id}`}`;
    const countdown = node.querySelector('.countdown');
    if (status === 'held') {
      const left = Math.ceil((parseTime(hold.expires_at).getTime() - now()) / 1000);
      countdown.dataset.secondsLeft = String(left);
      countdown.textContent = `Expires in ${clock(left)}`;
      node.dataset.urgent = String(left <= URGENT_SECONDS);
    } else {
      delete countdown.dataset.secondsLeft;
      node.dataset.urgent = 'false';
      countdown.textContent =
        status === 'confirmed'
          ? `Confirmed${hold.confirmed_at ? ` at ${timeFormat.format(parseTime(hold.confirmed_at))}` : ''}: the units are yours.`
          : 'Expired: its units went back on sale.';
    }
    for (const button of node.querySelectorAll('button[data-action]')) {
      const action = button.dataset.action;
      button.hidden = !(
        (status === 'held' && action !== 'dismiss') ||
        (status === 'confirmed' && action === 'cancel') ||
        (status === 'expired' && action === 'dismiss')
      );
    }
  }

  // Every second (checked four times a second, so no second is skipped), the countdowns.
  setInterval(() => {
    for (const record of holds.values()) {
      if (record.hold.status === 'held') fillHold(record);
    }
  }, 250);

  $('holds').addEventListener('click', (event) => {
    const button = event.target.closest('button[data-action]');
    if (!button) return;
    const id = button.closest('li').dataset.holdId;
    if (holds.has(id)) act(id, button.dataset.action, button);
  });

  // "2 units of Sat, 1 Jun 09:00–10:00".
  function holdLabel(record) {
    const amount = record.quantity ? units(record.quantity) : 'the units';
    return `${amount} of ${record.slot ? slotLabel(record.slot) : `slot ${record.hold.slot_id}`}`;
  }

  async function act(id, action, button) {
    const record = holds.get(id);
    const label = holdLabel(record);
    if (action === 'dismiss') {
      forget(id);
      return;
    }
    const [method, path, doing] = {
      confirm: ['POST', `/holds/${id}/confirm`, 'confirm'],
      renew: ['POST', `/holds/${id}/renew`, 'renew'],
      cancel: ['DELETE', `/holds/${id}`, 'cancel'],
    }[action];
    button.disabled = true;
    const answer = await call(method, path);
    button.disabled = false;
    if (!answer.ok) {
      fail(`Could not ${doing} the hold of ${label}`, answer.problem);
      settle(id, answer.problem.code);
      refreshSoon();
      return;
    }
    keep(answer.data, {});
    const done = {
      confirm: `Confirmed: ${label} are yours.`,
      renew: `Renewed: the hold of ${label} now expires in ${clock(Math.ceil((parseTime(answer.data.expires_at).getTime() - now()) / 1000))}.`,
      cancel: `Cancelled: ${label} went back on sale.`,
    }[action];
    show('info', done);
    refreshSoon();
  }

  // What a refusal says about the hold itself.
  function settle(id, code) {
    const record = holds.get(id);
    if (!record) return;
    if (code === 'hold_not_found' || code === 'hold_cancelled') forget(id);
    else if (code === 'hold_expired') keep({ ...record.hold, status: 'expired' }, {});
  }

  // Asks the server for a hold's state (after a change on its slot, or a reload); asked
  // again once the answer is in when another change came meanwhile.
  const rereading = new Map(); // hold id → whether to ask again
  async function reread(id) {
    if (rereading.has(id)) {
      rereading.set(id, true);
      return;
    }
    rereading.set(id, false);
    const answer = await call('GET', `/holds/${id}`);
    const again = rereading.get(id);
    rereading.delete(id);
    // A hold forgotten meanwhile (cancelled, dismissed) stays forgotten.
    if (!holds.has(id)) return;
    if (answer.ok && answer.data.status === 'cancelled') {
      const record = holds.get(id);
      show('info', `The hold of ${holdLabel(record)} was cancelled elsewhere; they went back on sale.`);
    }
    if (answer.ok) keep(answer.data, {});
    else settle(id, answer.problem.code);
    if (again) reread(id);
  }

  function restore() {
    let kept = [];
    try {
      kept = JSON.parse(sessionStorage.getItem(HOLDS_KEY) || '[]');
    } catch (error) {
      kept = [];
    }
    for (const { hold, quantity, slot } of Array.isArray(kept) ? kept : []) {
      if (hold && hold.hold_id !== undefined) {
        keep(hold, { quantity, slot });
        reread(String(hold.hold_id));
      }
    }
  }

  // ---- The change stream ------------------------------------------------------------------

  // The changes that may leave one of this tab's holds in another state.
  const HOLD_CHANGES = new Set(['hold_confirmed', 'hold_cancelled', 'hold_expired', 'hold_renewed']);
  let pollTimer = null;
  let settleTimer = null;

  function setLive(state, text) {
    const live = $('live');
    live.dataset.state = state;
    live.textContent = text;
  }

  // This tab's open holds, read again.
  function rereadOpen() {
    for (const [id, record] of holds) {
      if (record.hold.status === 'held' || record.hold.status === 'confirmed') reread(id);
    }
  }

  // Without the stream: the listing and this tab's open holds, read every POLL_MS.
  function pollOnce() {
    refreshSoon();
    rereadOpen();
  }

  function poll(on) {
    if (on && pollTimer === null) {
      pollOnce();
      pollTimer = setInterval(pollOnce, POLL_MS);
    } else if (!on && pollTimer !== null) {
      clearInterval(pollTimer);
      pollTimer = null;
    }
  }

  // Any event means something changed: the listing is read again (at most every
  // REFRESH_GAP_MS). The stream names a change's slot, never its hold (it is public): a change
  // to a hold on a slot where this tab has open holds has them asked for again (a cancel by
  // the back office, an expiry swept by the server).
  function changed(data) {
    refreshSoon();
    // Once more after the changes stop: a server's cached listing may learn of a change made
    // by another server on the same database a moment after the stream brought it.
    clearTimeout(settleTimer);
    settleTimer = setTimeout(refreshSoon, SETTLE_MS);
    let event;
    try {
      event = JSON.parse(data);
    } catch (error) {
      return;
    }
    if (!event || !HOLD_CHANGES.has(event.kind)) return;
    for (const [id, record] of holds) {
      const open = record.hold.status === 'held' || record.hold.status === 'confirmed';
      if (open && String(record.hold.slot_id) === String(event.slot_id)) reread(id);
    }
  }

  // The stream is opened first and the listing read once it is open, so no change falls
  // between the two. On a dropped connection the browser reconnects by itself, resuming
  // with Last-Event-ID; a stream it gave up on is opened anew after REOPEN_MS, the listing
  // polled meanwhile. Every open after the first reads this tab's open holds again too: a
  // stream opened anew resumes from the present, and a change the browser had only begun to
  // receive when the connection dropped may count as seen.
  let everOpen = false;
  function follow() {
    setLive('connecting', 'Connecting…');
    let stream;
    try {
      stream = new EventSource(BASE + '/changes');
    } catch (error) {
      setLive('offline', 'Not live: rereading every few seconds');
      poll(true);
      setTimeout(follow, REOPEN_MS);
      return;
    }
    stream.onopen = () => {
      setLive('open', 'Live');
      poll(false);
      refreshSoon();
      if (everOpen) rereadOpen();
      everOpen = true;
    };
    stream.onmessage = (event) => changed(event.data);
    // A `reset`: the browser resumed from further back than the server keeps changes, so some
    // may be gone for good: the listing and every hold of this tab are read again.
    stream.addEventListener('reset', () => {
      refreshSoon();
      for (const id of holds.keys()) reread(id);
    });
    stream.onerror = () => {
      if (stream.readyState === EventSource.CLOSED) {
        stream.close();
        setLive('offline', 'Not live: rereading every few seconds');
        poll(true);
        setTimeout(follow, REOPEN_MS);
      } else {
        setLive('connecting', 'Reconnecting…');
      }
    };
  }

  restore();
  follow();
  setTimeout(() => {
    if (!listing.read) refreshSoon();
  }, FIRST_READ_MS);
})();
