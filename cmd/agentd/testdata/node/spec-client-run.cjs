// Runs the spec's example client (spec-client.cjs) against agentd.
//
//   node spec-client-run.cjs <ws base url> <session id> <token> <runs>
//
// The class dials ws://localhost:8000 and knows no other server, so the
// WebSocket it is given (the npm ws package, as a browser's would be)
// points that address at the server under test. Every message the class
// handles is printed to stdout as one JSON line before the class sees it;
// its own console output goes to stderr. After <runs> completed messages
// the client closes as the class does (unsubscribe, then close 1000).
'use strict';

const Base = require('ws');
const [base, sessionId, token, runsArg] = process.argv.slice(2);
const runs = Number(runsArg || '1');

class PointedWebSocket extends Base {
  constructor(url, ...rest) {
    super(url.replace('ws://localhost:8000', base), ...rest);
  }
}
global.WebSocket = PointedWebSocket;

for (const level of ['log', 'warn', 'error']) {
  console[level] = (...args) => process.stderr.write(`[${level}] ${args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ')}\n`);
}

const Client = require('./spec-client.cjs');
const handle = Client.prototype.handleMessage;
let completed = 0;
Client.prototype.handleMessage = function (message) {
  process.stdout.write(JSON.stringify(message) + '\n');
  handle.call(this, message);
  if (message.type === 'completed' && ++completed >= runs) {
    this.close();
    // The class's heartbeat interval keeps Node alive; leave once the
    // close has gone out.
    setTimeout(() => process.exit(0), 300);
  }
};

new Client(sessionId, token);
