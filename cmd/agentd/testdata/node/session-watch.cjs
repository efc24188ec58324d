'use strict';
// session-watch follows one agentd session over the per-session WebSocket
// (/api/v1/ws/sessions/{id}), as a browser or script would: it subscribes,
// prints every message the server sends as one JSON line on stdout, answers
// the server's JSON pings, and when the connection drops it reconnects with
// exponential backoff and subscribes again from the last seq it saw, so that
// nothing is missed and nothing arrives twice. After the given number of
// `completed` messages it unsubscribes and exits 0.
//
//   node session-watch.cjs <ws-url> <session-id> [runs]
//
// The JWT comes from AGENTD_WS_TOKEN (kept out of the command line, which
// other users can read). AGENTD_WS_BACKOFF_MS and AGENTD_WS_BACKOFF_MAX_MS
// set the first and the largest reconnect delay (the protocol suggests 1 s
// and 60 s, the defaults). What the client does goes to stderr.

const WebSocket = require('ws');

function positiveInt(text, fallback) {
  const n = Number.parseInt(text ?? '', 10);
  return Number.isFinite(n) && n > 0 ? n : fallback;
}

class SessionWatcher {
  constructor(opts) {
    this.url = opts.url;
    this.sessionId = opts.sessionId;
    this.token = opts.token;
    this.runs = opts.runs;
    this.firstDelay = opts.firstDelay;
    this.maxDelay = opts.maxDelay;
    this.delay = opts.firstDelay;
    this.attempt = 0;
    this.cursor = null; // highest seq seen: where a resubscription resumes
    this.completed = 0;
    this.leaving = false;
  }

  // run resolves with the exit code once the watch is over.
  run() {
    return new Promise((resolve) => {
      this.finish = resolve;
      this.connect();
    });
  }

  log(...parts) {
    process.stderr.write(`session-watch: ${parts.join(' ')}\n`);
  }

  connect() {
    this.attempt += 1;
    this.opened = false;
    const target = new URL(this.url);
    if (this.token) {
      // A browser cannot set headers on a WebSocket, so the query form is
      // the portable one.
      target.searchParams.set('token', this.token);
    }
    const ws = new WebSocket(target);
    this.ws = ws;
    ws.on('open', () => {
      this.opened = true;
      this.delay = this.firstDelay;
      this.log(`connected attempt=${this.attempt}`);
      const sub = { type: 'subscribe', session_id: this.sessionId };
      if (this.cursor !== null) {
        sub.after_seq = this.cursor;
      }
      this.log(`subscribe ${JSON.stringify(sub)}`);
      this.send(sub);
    });
    ws.on('message', (data, isBinary) => {
      if (isBinary) {
        this.log('unexpected binary frame');
        this.stop(3);
        return;
      }
      this.receive(data.toString('utf8'));
    });
    ws.on('error', (err) => {
      if (!this.opened) {
        this.log(`connect failed attempt=${this.attempt}: ${err.message}`);
      } else {
        this.log(`error: ${err.message}`);
      }
    });
    ws.on('close', (code, reason) => this.closed(code, reason.toString('utf8')));
  }

  send(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(msg) + '\n');
    }
  }

  receive(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch (err) {
      this.log(`not JSON: ${err.message}: ${text.slice(0, 200)}`);
      this.stop(3);
      return;
    }
    // The server's own bytes, one line each, for the caller to check.
    process.stdout.write(text.endsWith('\n') ? text : text + '\n');
    if (Number.isInteger(msg.seq) && (this.cursor === null || msg.seq > this.cursor)) {
      this.cursor = msg.seq;
    }
    switch (msg.type) {
      case 'ping':
        this.send({ type: 'pong', timestamp: msg.timestamp });
        break;
      case 'completed':
        this.completed += 1;
        this.log(`completed ${this.completed}/${this.runs} final_state=${msg.final_state}`);
        if (this.completed >= this.runs && !this.leaving) {
          this.leaving = true;
          this.send({ type: 'unsubscribe', session_id: this.sessionId });
        }
        break;
      case 'error':
        this.log(`server error ${msg.code ?? msg.error_type}: ${msg.message}`);
        break;
      default:
        break;
    }
  }

  closed(code, reason) {
    this.log(`closed code=${code} reason=${JSON.stringify(reason)}`);
    if (this.done) {
      return;
    }
    if (this.leaving && code === 1000) {
      this.stop(0);
      return;
    }
    if (code === 4001 || code === 4004) {
      // Retrying cannot fix a refused token or a session that is not ours.
      this.stop(2);
      return;
    }
    this.reconnectLater();
  }

  // reconnectLater waits the current delay, ±25 % so that many clients cut
  // off together do not return together, and doubles it for next time.
  reconnectLater() {
    const nominal = this.delay;
    const wait = Math.round(nominal * (0.75 + Math.random() * 0.5));
    this.delay = Math.min(nominal * 2, this.maxDelay);
    this.log(`reconnect delay_ms=${nominal} wait_ms=${wait} after_seq=${this.cursor}`);
    setTimeout(() => this.connect(), wait);
  }

  stop(code) {
    this.done = true;
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.close(1000, 'done');
    }
    this.finish(code);
  }
}

async function main() {
  const [url, sessionId, runs] = process.argv.slice(2);
  if (!url || !sessionId) {
    process.stderr.write('usage: node session-watch.cjs <ws-url> <session-id> [runs]\n');
    return 64;
  }
  const watcher = new SessionWatcher({
    url,
    sessionId,
    token: process.env.AGENTD_WS_TOKEN || '',
    runs: positiveInt(runs, 1),
    firstDelay: positiveInt(process.env.AGENTD_WS_BACKOFF_MS, 1000),
    maxDelay: positiveInt(process.env.AGENTD_WS_BACKOFF_MAX_MS, 60000),
  });
  return watcher.run();
}

main().then((code) => {
  process.exitCode = code;
  // Let stdout drain, then leave even if a reconnect timer is pending.
  process.stdout.write('', () => process.exit(code));
});
