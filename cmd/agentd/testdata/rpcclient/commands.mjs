// commands.mjs starts an RPC agent with pi's own RpcClient (from the
// installed @mariozechner/pi-coding-agent package), asks it getCommands()
// and prints the answer as one JSON line. The Go test
// (commands_e2e_test.go) runs it against pi's dist/cli.js and against
// agentd (agentd-rpc.mjs) with the same HOME and directory, and compares.
//
// Usage: node commands.mjs '{"nodeModules": ..., "cliPath": ..., "cwd": ...}'
import { readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const guard = setTimeout(() => {
  process.stderr.write("commands.mjs: timed out\n");
  process.exit(3);
}, cfg.timeoutMs ?? 60000);

const pkgDir = path.join(cfg.nodeModules, "@mariozechner", "pi-coding-agent");
const pkg = JSON.parse(readFileSync(path.join(pkgDir, "package.json"), "utf8"));
const entry = pkg.exports?.["."]?.import ?? pkg.main;
const { RpcClient } = await import(pathToFileURL(path.join(pkgDir, entry)).href);

const client = new RpcClient({ cliPath: cfg.cliPath, cwd: cfg.cwd, provider: "mock", model: "mock-model", args: ["--no-session"] });
let code = 0;
try {
  await client.start();
  const commands = await client.getCommands();
  process.stdout.write(JSON.stringify({ piVersion: pkg.version, commands }) + "\n");
} catch (err) {
  process.stderr.write(`commands.mjs: ${err.stack ?? err}\n`);
  code = 1;
} finally {
  await client.stop();
  clearTimeout(guard);
}
process.exit(code);
