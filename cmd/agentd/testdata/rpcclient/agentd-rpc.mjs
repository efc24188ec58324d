// agentd-rpc.mjs stands in for pi's dist/cli.js so that pi's own RpcClient
// can drive agentd.
//
// RpcClient.start() always runs `node <cliPath> --mode rpc [--provider p]
// [--model m] [args...]`: it has no option for an arbitrary executable, and
// node cannot run a shell script as its main module. This script is that
// cliPath: it runs `$AGENTD_BIN rpc [--provider p] [--model m] [args...]`
// on the same stdin, stdout and stderr (the child reads and writes the
// pipes directly; nothing is copied through node), forwards the signals
// RpcClient.stop() sends, and exits as the child exits.
import { spawn } from "node:child_process";
import { constants } from "node:os";

const bin = process.env.AGENTD_BIN;
if (!bin) {
  process.stderr.write("agentd-rpc.mjs: AGENTD_BIN is not set\n");
  process.exit(2);
}

const argv = process.argv.slice(2);
const args = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--mode") {
    if (argv[i + 1] !== "rpc") {
      process.stderr.write(`agentd-rpc.mjs: only --mode rpc is supported, got ${argv[i + 1]}\n`);
      process.exit(2);
    }
    i++;
    continue;
  }
  args.push(argv[i]);
}

const child = spawn(bin, ["rpc", ...args], { stdio: "inherit" });
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(sig, () => child.kill(sig));
}
child.on("error", (err) => {
  process.stderr.write(`agentd-rpc.mjs: cannot run ${bin}: ${err.message}\n`);
  process.exit(127);
});
child.on("exit", (code, signal) => {
  process.exit(code ?? 128 + (constants.signals[signal] ?? 0));
});
