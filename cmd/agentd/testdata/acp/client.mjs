// Drives `agentd acp` with the official ACP TypeScript SDK as an editor
// would, and prints what it saw as one JSON object per step on stdout.
//
//   node client.mjs <node_modules dir> <step> [<step> ...] -- <agentd> <args...>
//
// Steps run in order against one agentd process (the "restart" step starts
// a new one with the same arguments, for load and list). The cwd of the
// sessions is the process's cwd. A step is one of:
//
//   init                         initialize; prints the agent's capabilities
//   init-editor                  initialize offering fs and terminal, served by
//                                this editor with its own rights (real files,
//                                real processes)
//   editor-log                   prints the fs and terminal requests it was sent
//   new                          session/new; remembers the session id
//   new-mcp:<name>=<cmd>[,args]  session/new with one stdio MCP server
//   prompt:<text>                a prompt; prints the text, the updates and the stop reason
//   allow:<text>  reject:<text>  a prompt whose permission request is answered so
//   cancel:<text>                a prompt cancelled while its permission request is pending
//   restart                      a new agentd process
//   list                         session/list for the cwd
//   load                         session/load of the remembered session; prints the replay
//   commands                     waits for the agent's available_commands_update; prints it
//   resume                       session/resume of the remembered session; prints what came
//   fork                         session/fork of the remembered session; remembers the new one
//   use:<id>                     remembers <id> as the session (for resume, load, fork)
//   init-elicit                  initialize offering form elicitation
//   elicit-answer:<json>         the answer to the elicitation/create requests that follow
//                                (a prompt step prints the requests it saw as "elicited")
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [, , modules, ...rest] = process.argv;
const sep = rest.indexOf("--");
const steps = rest.slice(0, sep);
const [agentd, ...agentdArgs] = rest.slice(sep + 1);

const require = createRequire(modules.replace(/\/?$/, "/"));
const acp = await import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);

const cwd = process.cwd();
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

// permission decides each session/request_permission; set per step.
let permission = async () => ({ outcome: { outcome: "cancelled" } });
// onAsked runs when a permission request arrives (cancel uses it).
let onAsked = () => {};
const updates = [];
let firstUpdateAt = 0;
// commandUpdates are the available_commands_update notifications, kept
// across steps (the agent sends them on its own after session/new);
// commandWaiters are resolved by the next one.
const commandUpdates = [];
let commandWaiters = [];
// editorLog is every fs and terminal request, as the editor got it.
const editorLog = [];
const terminals = new Map();
// elicitAnswer answers elicitation/create; elicited are the requests.
let elicitAnswer = { action: "decline" };
const elicited = [];

function start() {
  const child = spawn(agentd, agentdArgs, { stdio: ["pipe", "pipe", "inherit"] });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = acp
    .client({ name: "agentd-acp-e2e" })
    .onNotification("session/update", async ({ params }) => {
      if (!firstUpdateAt) firstUpdateAt = performance.now();
      // _t is when the update arrived (ms), for the test's timings.
      updates.push({ ...params.update, _t: performance.now() });
      if (params.update.sessionUpdate === "available_commands_update") {
        commandUpdates.push(params.update);
        for (const w of commandWaiters) w();
        commandWaiters = [];
      }
    })
    .onRequest("session/request_permission", async ({ params }) => {
      onAsked(params);
      return permission(params);
    })
    .onRequest("fs/read_text_file", async ({ params }) => {
      editorLog.push({ method: "fs/read_text_file", path: params.path });
      return { content: readFileSync(params.path, "utf8") };
    })
    .onRequest("fs/write_text_file", async ({ params }) => {
      editorLog.push({ method: "fs/write_text_file", path: params.path });
      writeFileSync(params.path, params.content);
      return {};
    })
    .onRequest("terminal/create", async ({ params }) => {
      editorLog.push({ method: "terminal/create", command: params.command, args: params.args });
      const r = spawnSync(params.command, params.args ?? [], { cwd: params.cwd, encoding: "utf8" });
      const id = "term-" + (terminals.size + 1);
      terminals.set(id, r);
      return { terminalId: id };
    })
    .onRequest("terminal/wait_for_exit", async ({ params }) => ({ exitCode: terminals.get(params.terminalId).status }))
    .onRequest("terminal/output", async ({ params }) => {
      const r = terminals.get(params.terminalId);
      return { output: (r.stdout ?? "") + (r.stderr ?? ""), truncated: false };
    })
    .onRequest("elicitation/create", async ({ params }) => {
      elicited.push(params);
      return elicitAnswer;
    })
    .onRequest("terminal/release", async () => ({}))
    .onRequest("terminal/kill", async () => ({}));
  return { child, stream, app };
}

async function run(proc) {
  let sessionId = process.env.ACP_SESSION_ID || "";
  await proc.app.connectWith(proc.stream, async (ctx) => {
    for (let i = 0; i < steps.length; i++) {
      const step = steps[i];
      const colon = step.indexOf(":");
      const kind = colon < 0 ? step : step.slice(0, colon);
      const arg = colon < 0 ? "" : step.slice(colon + 1);
      updates.length = 0;
      elicited.length = 0;
      firstUpdateAt = 0;
      if (kind === "restart") {
        steps.splice(0, i + 1);
        throw new Restart(sessionId);
      }
      switch (kind) {
        case "init":
        case "init-editor": {
          const editor = kind === "init-editor";
          const r = await ctx.request("initialize", {
            protocolVersion: acp.PROTOCOL_VERSION ?? 1,
            clientCapabilities: { fs: { readTextFile: editor, writeTextFile: editor }, terminal: editor },
          });
          out({ step, result: r });
          break;
        }
        case "init-elicit": {
          const r = await ctx.request("initialize", {
            protocolVersion: acp.PROTOCOL_VERSION ?? 1,
            clientCapabilities: { elicitation: { form: {} } },
          });
          out({ step, result: r });
          break;
        }
        case "elicit-answer":
          elicitAnswer = JSON.parse(arg);
          break;
        case "resume": {
          const r = await ctx.request("session/resume", { sessionId, cwd, mcpServers: [] });
          out({ step, result: r, updates: [...updates] });
          break;
        }
        case "use":
          sessionId = arg;
          out({ step });
          break;
        case "fork": {
          const r = await ctx.request("session/fork", { sessionId, cwd, mcpServers: [] });
          sessionId = r.sessionId;
          out({ step, result: r, updates: [...updates] });
          break;
        }
        case "editor-log":
          out({ step, result: { requests: [...editorLog] } });
          break;
        case "new":
        case "new-mcp": {
          const mcpServers = [];
          if (kind === "new-mcp") {
            const [name, spec] = [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)];
            const [command, ...args] = spec.split(",");
            mcpServers.push({ name, command, args, env: [] });
          }
          const r = await ctx.request("session/new", { cwd, mcpServers });
          sessionId = r.sessionId;
          out({ step, result: r });
          break;
        }
        case "prompt":
        case "allow":
        case "reject":
        case "cancel": {
          const asked = [];
          permission = async (p) => {
            asked.push(p);
            if (kind === "allow") return { outcome: { outcome: "selected", optionId: p.options.find((o) => o.kind === "allow_once").optionId } };
            if (kind === "reject") return { outcome: { outcome: "selected", optionId: p.options.find((o) => o.kind === "reject_once").optionId } };
            // cancel: the turn is cancelled while this request is open;
            // the protocol has the client answer it "cancelled" then.
            await ctx.notify("session/cancel", { sessionId });
            return { outcome: { outcome: "cancelled" } };
          };
          const t0 = performance.now();
          const r = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: arg }] });
          const text = updates
            .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text")
            .map((u) => u.content.text)
            .join("");
          out({ step, stopReason: r.stopReason, text, updates: [...updates], asked, elicited: [...elicited], firstUpdateMs: firstUpdateAt ? firstUpdateAt - t0 : -1, totalMs: performance.now() - t0 });
          break;
        }
        case "list": {
          const r = await ctx.request("session/list", { cwd });
          out({ step, result: r });
          break;
        }
        case "load": {
          const r = await ctx.request("session/load", { sessionId, cwd, mcpServers: [] });
          out({ step, result: r, updates: [...updates] });
          break;
        }
        case "commands": {
          if (!commandUpdates.length) await new Promise((res) => commandWaiters.push(res));
          out({ step, updates: [commandUpdates[commandUpdates.length - 1]] });
          break;
        }
        default:
          throw new Error("unknown step " + step);
      }
    }
    steps.length = 0;
  });
  proc.child.stdin.end();
  await new Promise((res) => (proc.child.exitCode !== null ? res() : proc.child.on("exit", res)));
  out({ step: "exit", code: proc.child.exitCode });
}

class Restart extends Error {
  constructor(sessionId) {
    super("restart");
    this.sessionId = sessionId;
  }
}

for (;;) {
  const proc = start();
  try {
    await run(proc);
    break;
  } catch (e) {
    if (!(e instanceof Restart)) {
      proc.child.kill();
      out({ step: "error", message: String(e && e.stack ? e.stack : e), data: e && e.data });
      process.exit(1);
    }
    proc.child.stdin.end();
    await new Promise((res) => (proc.child.exitCode !== null ? res() : proc.child.on("exit", res)));
    out({ step: "exit", code: proc.child.exitCode });
    process.env.ACP_SESSION_ID = e.sessionId;
  }
}
