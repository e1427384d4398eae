// Drives our AG-UI endpoint with the official TypeScript client (@ag-ui/client).
// argv: <node_modules prefix> <endpoint url> <mode: run | approve | abort> [ready file]
// Prints one JSON line per event it saw ({"event": ...}), then {"done": ...}.
// abort: once a bash call started and the ready file holds something (the shell wrote
// it: it runs), abort the run (the abort must meet a running shell, not race its start).
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";

const [prefix, url, mode, ready] = process.argv.slice(2);
const require = createRequire(prefix + "/node_modules/");
const { HttpAgent } = require("@ag-ui/client");

const out = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const agent = new HttpAgent({ url, threadId: "node-" + mode });
agent.messages = [{ id: "u1", role: "user", content: "hello from node" }];

let interrupts = [];
const subscriber = {
  onEvent({ event }) {
    out({ event });
    if (mode === "abort" && event.type === "TOOL_CALL_START" && event.toolCallName === "bash") {
      const id = event.toolCallId;
      // The shell has no event of its own to wait on: poll its file (as the test does).
      const poll = setInterval(() => {
        if (existsSync(ready) && readFileSync(ready, "utf8").trim()) {
          clearInterval(poll);
          out({ aborting: id });
          agent.abortRun();
        }
      }, 10);
    }
  },
  onRunFinishedEvent({ event }) {
    if (event.outcome && event.outcome.type === "interrupt") interrupts = event.outcome.interrupts;
  },
};

try {
  const first = await agent.runAgent({ runId: "r1" }, subscriber);
  if (mode === "approve") {
    out({ interrupts });
    const resume = interrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: { approved: true } }));
    const second = await agent.runAgent({ runId: "r2", resume }, subscriber);
    out({ done: second.result ?? null, messages: agent.messages });
  } else {
    out({ done: first.result ?? null, messages: agent.messages });
  }
} catch (err) {
  out({ error: String(err && err.name), message: String(err && err.message) });
}
