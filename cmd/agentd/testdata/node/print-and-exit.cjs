// Writes <n> JSON lines of type "line" to stdout and <n> lines of filler
// to stderr, then a last line to each ({"type":"last"}, "last written"),
// and exits at once: the helpers of sessionws_node_test.go that wait for
// a line or a log of a Node client must see the last ones, though the
// client has exited by the time they look again.
'use strict';

const n = Number(process.argv[2] || '1000');
let out = '';
let err = '';
for (let i = 0; i < n; i++) {
  out += JSON.stringify({ type: 'line', i }) + '\n';
  err += `filler ${i} ${'.'.repeat(64)}\n`;
}
out += JSON.stringify({ type: 'last' }) + '\n';
err += 'last written\n';
// Line by line, so the test's readers wake for each.
const lines = (s) => s.split(/(?<=\n)/);
for (const l of lines(out)) process.stdout.write(l);
for (const l of lines(err)) process.stderr.write(l);
process.stdout.write('', () => process.stderr.write('', () => process.exit(0)));
