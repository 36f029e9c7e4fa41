// A server-sent event reader over fetch. The browser's EventSource cannot
// send an Authorization header, and the admin token must never travel in a
// cookie or the URL, so the stream is read and parsed here. It reconnects
// after any failure (the node restarted, the network dropped), resuming
// with Last-Event-ID.

const MAX_DELAY = 5000;

export class EventStream {
  // url: the stream; headers(): request headers (the token) at each attempt;
  // onEvent({id, type, data}); onState(state, detail) with state one of
  // "connecting", "open", "reconnecting", "unauthorized".
  constructor(url, { headers, onEvent, onState }) {
    this.url = url;
    this.headers = headers;
    this.onEvent = onEvent;
    this.onState = onState;
    this.lastId = '';
    this.retry = 2000;
    this.stopped = false;
    this.controller = null;
    this.wakeUp = null;
  }

  start() {
    this.stopped = false;
    this.loop();
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
    this.wake();
  }

  // wake ends a wait before the next attempt (the token was entered).
  wake() {
    if (this.wakeUp) this.wakeUp();
  }

  async loop() {
    let failures = 0;
    while (!this.stopped) {
      this.onState(failures === 0 ? 'connecting' : 'reconnecting', {});
      let opened = false;
      try {
        this.controller = new AbortController();
        const headers = { ...this.headers(), Accept: 'text/event-stream' };
        if (this.lastId) headers['Last-Event-ID'] = this.lastId;
        const resp = await fetch(this.url, {
          headers, cache: 'no-store', credentials: 'omit', signal: this.controller.signal,
        });
        if (resp.status === 401) {
          this.onState('unauthorized', {});
          await this.pause(0); // until wake(): a new token
          continue;
        }
        if (!resp.ok || !resp.body) throw new Error(`HTTP ${resp.status}`);
        opened = true;
        failures = 0;
        this.onState('open', {});
        await this.read(resp.body);
      } catch (err) {
        if (this.stopped) return;
      }
      if (this.stopped) return;
      failures = opened ? 1 : failures + 1;
      const delay = Math.min(this.retry * Math.min(failures, 3) / 2, MAX_DELAY);
      this.onState('reconnecting', { retryIn: delay });
      await this.pause(delay);
    }
  }

  // pause waits ms (0: until wake()).
  pause(ms) {
    return new Promise((resolve) => {
      let timer = null;
      this.wakeUp = () => { clearTimeout(timer); this.wakeUp = null; resolve(); };
      if (ms > 0) timer = setTimeout(this.wakeUp, ms);
    });
  }

  async read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = { id: null, type: '', data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      const lines = buf.split(/\r\n|\r|\n/);
      buf = lines.pop();
      for (const line of lines) {
        if (line === '') {
          this.dispatch(ev);
          ev = { id: null, type: '', data: [] };
          continue;
        }
        if (line.startsWith(':')) continue; // a comment: keep-alive
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let value = i < 0 ? '' : line.slice(i + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        switch (field) {
          case 'event': ev.type = value; break;
          case 'data': ev.data.push(value); break;
          case 'id': ev.id = value; break;
          case 'retry': if (/^\d+$/.test(value)) this.retry = Number(value); break;
        }
      }
    }
  }

  dispatch(ev) {
    if (ev.id !== null) this.lastId = ev.id;
    if (ev.data.length === 0) return;
    let data;
    try {
      data = JSON.parse(ev.data.join('\n'));
    } catch {
      return;
    }
    this.onEvent({ id: ev.id, type: ev.type || 'message', data });
  }
}
