// Opens a session file with pi's own SessionManager and prints what pi
// makes of it, so agentd's tests can check that pi reads agentd's files the
// way agentd does.
//
//   node pi_open.mjs <pi package dir | node_modules dir> <session.jsonl> [--append]
//
// Output (one JSON line): {header, entries, leafId, messages, thinkingLevel,
// model, name}. entries are pi's parsed entries; JSON.stringify keeps their
// key order, so each one prints as the line pi would write for it.
// --append makes pi append a user message and a label first, to check that
// agentd reads files pi continued.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [dir, file, ...flags] = process.argv.slice(2);
if (!dir || !file) {
	console.error("usage: node pi_open.mjs <pi package dir | node_modules dir> <session.jsonl> [--append]");
	process.exit(2);
}
let index = join(dir, "dist", "index.js");
if (!existsSync(index)) {
	index = join(dir, "@mariozechner", "pi-coding-agent", "dist", "index.js");
}
const { SessionManager } = await import(pathToFileURL(index).href);

const sm = SessionManager.open(file);
if (flags.includes("--append")) {
	sm.appendMessage({ role: "user", content: [{ type: "text", text: "appended by pi" }], timestamp: 1700000009999 });
	sm.appendLabelChange(sm.getEntries()[0].id, "pi-label");
}
const ctx = sm.buildSessionContext();
process.stdout.write(
	JSON.stringify({
		header: sm.getHeader(),
		entries: sm.getEntries(),
		leafId: sm.getLeafId(),
		messages: ctx.messages,
		thinkingLevel: ctx.thinkingLevel,
		model: ctx.model,
		name: sm.getSessionName() ?? null,
	}) + "\n",
);
