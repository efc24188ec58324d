// Drives `agentd acp` with the official ACP TypeScript SDK through a
// session's settings: its modes, models and config options. One JSON
// object per step on stdout.
//
//   node settings.mjs <node_modules dir> <step> [<step> ...] -- <agentd> <args...>
//
// Steps (the session's cwd is the process's):
//
//   init                  initialize
//   new                   session/new; remembers the session id
//   mode:<id>             session/set_mode
//   model:<id>            session/set_model
//   option:<id>=<value>   session/set_config_option
//   prompt:<text>         a prompt; prints the stop reason and the updates
//   restart               a new agentd process with the same arguments
//   load                  session/load of the remembered session
//
// A request the agent refuses prints {step, error: {code, message}} and
// the steps go on.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [, , modules, ...rest] = process.argv;
const sep = rest.indexOf("--");
let steps = rest.slice(0, sep);
const [agentd, ...agentdArgs] = rest.slice(sep + 1);

const require = createRequire(modules.replace(/\/?$/, "/"));
const acp = await import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);

const cwd = process.cwd();
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const updates = [];
let sessionId = "";

function start() {
  const child = spawn(agentd, agentdArgs, { stdio: ["pipe", "pipe", "inherit"] });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = acp
    .client({ name: "agentd-acp-settings-e2e" })
    .onNotification("session/update", async ({ params }) => {
      updates.push(params.update);
    })
    .onRequest("session/request_permission", async () => ({ outcome: { outcome: "cancelled" } }));
  return { child, stream, app };
}

async function stop(proc) {
  proc.child.stdin.end();
  await new Promise((res) => (proc.child.exitCode !== null ? res() : proc.child.on("exit", res)));
}

for (;;) {
  const proc = start();
  let restart = false;
  await proc.app.connectWith(proc.stream, async (ctx) => {
    while (steps.length > 0) {
      const step = steps.shift();
      const colon = step.indexOf(":");
      const kind = colon < 0 ? step : step.slice(0, colon);
      const arg = colon < 0 ? "" : step.slice(colon + 1);
      if (kind === "restart") {
        restart = true;
        return;
      }
      updates.length = 0;
      try {
        let r;
        switch (kind) {
          case "init":
            r = await ctx.request("initialize", { protocolVersion: acp.PROTOCOL_VERSION ?? 1, clientCapabilities: {} });
            break;
          case "new":
            r = await ctx.request("session/new", { cwd, mcpServers: [] });
            sessionId = r.sessionId;
            break;
          case "mode":
            r = await ctx.request("session/set_mode", { sessionId, modeId: arg });
            break;
          case "model":
            r = await ctx.request("session/set_model", { sessionId, modelId: arg });
            break;
          case "option": {
            const eq = arg.indexOf("=");
            r = await ctx.request("session/set_config_option", { sessionId, configId: arg.slice(0, eq), value: arg.slice(eq + 1) });
            break;
          }
          case "prompt":
            r = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: arg }] });
            break;
          case "load":
            r = await ctx.request("session/load", { sessionId, cwd, mcpServers: [] });
            break;
          default:
            throw new Error("unknown step " + step);
        }
        // Notifications sent before a response are read before it.
        out({ step, result: r ?? {}, updates: [...updates] });
      } catch (e) {
        if (e && typeof e.code === "number") {
          out({ step, code: e.code, message: e.message });
          continue;
        }
        throw e;
      }
    }
  });
  await stop(proc);
  if (!restart) break;
}
out({ step: "exit" });
