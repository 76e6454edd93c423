// The daemons' "limits" config object: only known keys, only whole numbers,
// and zero only where it means something (the server's historyMs).
import { describe, expect, it } from "vitest";
import { defaultServerConfig, MAX_CLIENTS } from "../../../core/index.js";
import { numericLimits } from "../../../shells/cli/config.js";

const known = defaultServerConfig().limits;

describe("config limits", () => {
  it("takes known positive integers, and 0 only where allowed", () => {
    expect(numericLimits({ metadataBudget: 1 << 20, historyMs: 0, prunedMax: 10 }, known, "limits", ["historyMs"])).toEqual({
      metadataBudget: 1 << 20,
      historyMs: 0,
      prunedMax: 10,
    });
    expect(numericLimits(undefined, known, "limits")).toEqual({});
  });

  it("refuses unknown keys, fractions, negatives, strings, and 0 elsewhere, naming the key", () => {
    expect(() => numericLimits({ historyDays: 3 }, known, "limits")).toThrow(/unknown limit "historyDays" \(known: .*metadataBudget.*historyMs.*prunedMax/);
    expect(() => numericLimits({ prunedMax: 0 }, known, "limits", ["historyMs"])).toThrow("limits: limit prunedMax must be a positive integer");
    expect(() => numericLimits({ historyMs: -1 }, known, "limits", ["historyMs"])).toThrow("limits: limit historyMs must be a non-negative integer");
    expect(() => numericLimits({ metadataBudget: 1.5 }, known, "limits")).toThrow(/metadataBudget must be a positive integer/);
    expect(() => numericLimits({ metadataBudget: "64" }, known, "limits")).toThrow(/metadataBudget must be a positive integer/);
  });

  it("R-F6: maxClients is a configurable limit like the others (default MAX_CLIENTS); 0 is refused", () => {
    expect(known.maxClients).toBe(MAX_CLIENTS);
    expect(numericLimits({ maxClients: 500 }, known, "limits", ["historyMs"])).toEqual({ maxClients: 500 });
    expect(() => numericLimits({ maxClients: 0 }, known, "limits", ["historyMs"])).toThrow("limits: limit maxClients must be a positive integer");
  });
});

describe("config files", () => {
  it("a top-level key the daemon does not know stops it, by name; known keys in either spelling are taken, and flags win", async () => {
    const { mkdtempSync, writeFileSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const { settings } = await import("../../../shells/cli/config.js");
    const { SERVER_OPTIONS } = await import("../../../shells/cli/server-cli.js");
    const dir = mkdtempSync(join(tmpdir(), "rvbox-config-"));
    const bad = join(dir, "bad.json");
    writeFileSync(bad, JSON.stringify({ lisen: "127.0.0.1:1" }));
    expect(() => settings(["--config", bad], SERVER_OPTIONS, "usage")).toThrow(`config file ${bad}: unknown key "lisen"`);
    const good = join(dir, "good.json");
    writeFileSync(good, JSON.stringify({ listen: "127.0.0.1:1", agentTokens: "/t", "log-level": "warn" }));
    const s = settings(["--config", good, "--log-level", "debug"], SERVER_OPTIONS, "usage");
    expect([s.get("listen"), s.get("agent-tokens"), s.get("log-level")]).toEqual(["127.0.0.1:1", "/t", "debug"]);
  });
});
