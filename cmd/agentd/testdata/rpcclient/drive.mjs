// drive.mjs drives an RPC agent with pi's own RpcClient (from the installed
// @mariozechner/pi-coding-agent package) and prints one JSON summary of what
// it observed on stdout. The Go test (rpcclient_test.go) makes the
// assertions; this script only records.
//
// Usage: node drive.mjs '<config JSON>'
//
//   nodeModules  the node_modules directory pi is installed in
//   cliPath      what RpcClient runs with node: agentd-rpc.mjs for agentd
//                (pi's dist/cli.js drives pi itself, for comparison)
//   cwd          working directory of the agent
//   policy       a permission policy file (agentd's --policy); when empty
//                the approval scenario is skipped
//   marker       a file a rejected tool call would have created
//   stepTimeoutMs  how long to wait for one step's events (hang guard)
//   totalTimeoutMs how long the whole run may take (hang guard)
//
// The mock model it expects (llmtest in the Go test): USE_TOOL -> a bash
// call `echo hello-from-tool`; CMD:<cmd> -> a bash call running cmd; SLOW
// -> an answer streamed one character per 100ms; a tool result -> "Tool
// said: ..."; anything else -> "Hello from mock! You said: <text>".
import { readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const stepTimeout = cfg.stepTimeoutMs ?? 60000;

const summary = { responses: [], unmatched: [], errors: [] };
let step = "load";

// stepSeq gives the event types the current step has seen, for a
// failure's message.
let stepSeq = () => [];

function finish(code) {
  summary.finalStep = step;
  process.stdout.write(JSON.stringify(summary) + "\n", () => process.exit(code));
}

// Whole-run hang guard: report what was seen so far instead of hanging.
const guard = setTimeout(() => {
  summary.errors.push(`timed out after ${cfg.totalTimeoutMs ?? 180000}ms in step ${step}`);
  finish(3);
}, cfg.totalTimeoutMs ?? 180000);

// Import RpcClient from the package's public entry point.
const pkgDir = path.join(cfg.nodeModules, "@mariozechner", "pi-coding-agent");
const pkg = JSON.parse(readFileSync(path.join(pkgDir, "package.json"), "utf8"));
const entry = pkg.exports?.["."]?.import ?? pkg.main;
const { RpcClient } = await import(pathToFileURL(path.join(pkgDir, entry)).href);
summary.piVersion = pkg.version;

// instrument records every line the client receives. RpcClient's void
// commands (prompt, steer, followUp, abort, ...) resolve whatever the
// response says, so success is checked here, from the raw lines.
function instrument(client, name) {
  const rec = { events: [] };
  const orig = client.handleLine.bind(client);
  client.handleLine = (line) => {
    let data;
    try {
      data = JSON.parse(line);
    } catch {
      summary.errors.push(`${name}: non-JSON line on stdout: ${line.slice(0, 200)}`);
    }
    if (data?.type === "response") {
      const matched = typeof data.id === "string" && client.pendingRequests.has(data.id);
      const r = { client: name, step, command: data.command, success: data.success };
      if (data.error !== undefined) r.error = data.error;
      (matched ? summary.responses : summary.unmatched).push(r);
    } else if (data) {
      rec.events.push(data);
    }
    orig(line);
  };
  return rec;
}

// waitEvent resolves with the first event (after subscribing) that pred
// accepts; subscribe before sending the command that causes it.
function waitEvent(client, pred, label) {
  let unsubscribe;
  let timer;
  const p = new Promise((resolve, reject) => {
    timer = setTimeout(() => {
      unsubscribe();
      reject(new Error(`step ${step}: no ${label} within ${stepTimeout}ms`));
    }, stepTimeout);
    unsubscribe = client.onEvent((e) => {
      if (pred(e)) {
        clearTimeout(timer);
        unsubscribe();
        resolve(e);
      }
    });
  });
  // A step awaits its waits in turn; one it has not reached yet when an
  // earlier await hangs times out unawaited. Marked handled, it does not
  // crash the script with its own message (masking where the step
  // really stopped, and losing the summary): the await that hangs
  // reports, and an unawaited one rejects to no one.
  p.catch(() => {});
  return p;
}

const isAgentEnd = (e) => e.type === "agent_end";
const isTextDelta = (e) => e.type === "message_update" && e.assistantMessageEvent?.type === "text_delta";

function textOf(m) {
  if (!m) return null;
  if (typeof m.content === "string") return m.content;
  return (m.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("");
}

// digest reduces a step's events to what the test asserts on: the event
// type sequence (runs of message_update folded into one), the messages
// started and ended, and the tool executions.
function digest(events) {
  const seq = [];
  for (const e of events) {
    const t = e.type === "message_update" ? "message_update" : e.type;
    if (t === "message_update" && seq[seq.length - 1] === t) continue;
    seq.push(t);
  }
  const ends = events.filter((e) => e.type === "message_end").map((e) => e.message);
  return {
    seq,
    agentEnds: events.filter(isAgentEnd).length,
    userTexts: events.filter((e) => e.type === "message_start" && e.message?.role === "user").map((e) => textOf(e.message)),
    assistantEnds: ends
      .filter((m) => m?.role === "assistant")
      .map((m) => ({
        text: textOf(m),
        stopReason: m.stopReason,
        toolCalls: (m.content ?? []).filter((c) => c.type === "toolCall").map((c) => ({ name: c.name, arguments: c.arguments })),
      })),
    toolResults: ends.filter((m) => m?.role === "toolResult").map((m) => ({ text: textOf(m), isError: m.isError })),
    toolStarts: events.filter((e) => e.type === "tool_execution_start").map((e) => ({ toolName: e.toolName, args: e.args })),
    toolEnds: events
      .filter((e) => e.type === "tool_execution_end")
      .map((e) => ({ toolName: e.toolName, isError: e.isError, text: textOf(e.result) })),
    queueUpdates: events.filter((e) => e.type === "queue_update").map((e) => ({ steering: e.steering, followUp: e.followUp })),
    textDeltas: events.filter(isTextDelta).length,
    uiRequests: events
      .filter((e) => e.type === "extension_ui_request")
      .map((e) => ({ method: e.method, title: e.title, message: e.message, options: e.options })),
    compaction: events
      .filter((e) => e.type === "compaction_start" || e.type === "compaction_end")
      .map((e) => ({ type: e.type, reason: e.reason, aborted: e.aborted, summary: e.result?.summary })),
  };
}

// runStep records the events of one step, from before fn sends its first
// command until fn returns.
async function runStep(rec, name, fn) {
  step = name;
  const from = rec.events.length;
  stepSeq = () => digest(rec.events.slice(from)).seq;
  const extra = (await fn()) ?? {};
  return { ...digest(rec.events.slice(from)), ...extra };
}

// prompt sends a prompt and waits for its agent_end.
async function promptAndIdle(client, text) {
  const idle = waitEvent(client, isAgentEnd, "agent_end");
  await client.prompt(text);
  await idle;
}

function newClient(args) {
  return new RpcClient({
    cliPath: cfg.cliPath,
    cwd: cfg.cwd,
    provider: "mock",
    model: "mock-model",
    args,
  });
}

async function stopClient(client, name) {
  const proc = client.process;
  if (!proc) return;
  const exited = new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) resolve();
    else proc.once("exit", () => resolve());
  });
  await client.stop();
  await exited;
  summary[`${name}Exit`] = { code: proc.exitCode, signal: proc.signalCode };
}

const clients = [];
try {
  // ---- the main session: persisted, every tool allowed ----
  step = "start";
  const c = newClient([]);
  clients.push([c, "main"]);
  const rec = instrument(c, "main");
  await c.start();

  step = "get_state";
  const st0 = await c.getState();
  summary.initialState = {
    provider: st0.model?.provider,
    model: st0.model?.id,
    isStreaming: st0.isStreaming,
    messageCount: st0.messageCount,
    sessionFile: st0.sessionFile ?? null,
    sessionId: st0.sessionId,
  };

  summary.tool = await runStep(rec, "tool", async () => {
    await promptAndIdle(c, "USE_TOOL please");
    return { lastText: await c.getLastAssistantText() };
  });

  summary.steer = await runStep(rec, "steer", async () => {
    const idle = waitEvent(c, isAgentEnd, "agent_end");
    const firstDelta = waitEvent(c, isTextDelta, "text_delta");
    await c.prompt("SLOW first prompt");
    await firstDelta;
    await c.steer("steer now");
    await c.followUp("follow up later");
    const mid = await c.getState();
    await idle;
    return { whileStreaming: { isStreaming: mid.isStreaming, pendingMessageCount: mid.pendingMessageCount } };
  });

  summary.abort = await runStep(rec, "abort", async () => {
    const idle = waitEvent(c, isAgentEnd, "agent_end");
    const firstDelta = waitEvent(c, isTextDelta, "text_delta");
    await c.prompt("SLOW abort me");
    await firstDelta;
    await c.abort();
    await idle;
    const after = await c.getState();
    return { after: { isStreaming: after.isStreaming, messageCount: after.messageCount } };
  });

  step = "get_session_stats";
  summary.stats = await c.getSessionStats();

  summary.compact = await runStep(rec, "compact", async () => {
    const res = await c.compact();
    return { result: { summary: res.summary, firstKeptEntryId: res.firstKeptEntryId, tokensBefore: res.tokensBefore } };
  });

  summary.fork = await runStep(rec, "fork", async () => {
    const before = await c.getState();
    const forkMessages = await c.getForkMessages();
    const target = forkMessages.find((m) => m.text === "SLOW first prompt");
    if (!target) throw new Error(`no fork message "SLOW first prompt" in ${JSON.stringify(forkMessages)}`);
    const res = await c.fork(target.entryId);
    const after = await c.getState();
    const messages = await c.getMessages();
    await promptAndIdle(c, "after fork");
    const afterPrompt = await c.getMessages();
    return {
      forkMessages: forkMessages.map((m) => m.text),
      result: res,
      sessionBefore: before.sessionFile ?? null,
      sessionAfter: after.sessionFile ?? null,
      messageCountAfter: after.messageCount,
      messagesAfter: messages.map((m) => ({ role: m.role, text: textOf(m) })),
      messagesAfterPrompt: afterPrompt.map((m) => ({ role: m.role, text: textOf(m) })),
    };
  });

  step = "get_session_stats_after_fork";
  summary.statsAfterFork = await c.getSessionStats();

  await stopClient(c, "main");

  // ---- tool approval through the extension UI sub-protocol ----
  if (cfg.policy) {
    step = "approval_start";
    const a = newClient(["--no-session", "--policy", cfg.policy]);
    clients.push([a, "approval"]);
    const arec = instrument(a, "approval");
    // RpcClient has no method for extension_ui_response: its send() would
    // replace the id with its own request id and wait for a response that
    // never comes. The answer is written to the child's stdin instead.
    const answers = [];
    a.onEvent((e) => {
      if (e.type !== "extension_ui_request" || e.method !== "select") return;
      const value = answers.shift();
      if (value === undefined) {
        summary.errors.push(`unexpected approval request in step ${step}: ${e.title}`);
        a.process.stdin.write(JSON.stringify({ type: "extension_ui_response", id: e.id, cancelled: true }) + "\n");
        return;
      }
      a.process.stdin.write(JSON.stringify({ type: "extension_ui_response", id: e.id, value }) + "\n");
    });
    await a.start();

    summary.approvals = {};
    const scenarios = [
      ["allow", "CMD:echo approved-$((40+2))", ["Allow"]],
      ["reject", `CMD:touch ${cfg.marker}`, ["Reject"]],
      ["always", "CMD:echo always-1", ["Always allow this tool in this session"]],
      ["afterAlways", "CMD:echo always-2", []],
    ];
    for (const [name, prompt, replies] of scenarios) {
      summary.approvals[name] = await runStep(arec, `approval_${name}`, async () => {
        answers.push(...replies);
        await promptAndIdle(a, prompt);
        return { unusedAnswers: answers.splice(0).length };
      });
    }
    await stopClient(a, "approval");
  }
} catch (err) {
  summary.errors.push(`step ${step}: ${err?.stack ?? err}\nevents in the step: ${stepSeq().join(" ")}\nresponses in the step: ${JSON.stringify(summary.responses.filter((r) => r.step === step))}`);
} finally {
  clearTimeout(guard);
  for (const [client, name] of clients) {
    if (client.process) {
      try {
        await stopClient(client, name);
      } catch (err) {
        summary.errors.push(`stopping ${name}: ${err}`);
      }
    }
  }
}
finish(summary.errors.length ? 1 : 0);
