// The server connection's phase table (core/server/conn-phase.ts): one way
// forward, one writer, and the phases agree with the envelope table.
import { describe, expect, it } from "vitest";
import { InvariantViolation } from "../../../core/errors.js";
import { ENVELOPES, PAYLOAD_CASES, serverAccepts } from "../../../core/protocol/envelopes.js";
import { CONN_PHASES, setPhase } from "../../../core/server/conn-phase.js";
import { ServerRig } from "../../support/server-rig.js";

describe("server connection phases", () => {
  it("R-D8: hello, welcoming, reconciling, ready: each phase has exactly one successor until ready", () => {
    const order = ["hello", "welcoming", "reconciling", "ready"] as const;
    for (let i = 0; i < order.length; i++) expect(CONN_PHASES[order[i]!].next).toEqual(i + 1 < order.length ? [order[i + 1]] : []);
  });

  it("setPhase refuses a step backwards or a skipped phase", () => {
    const r = new ServerRig();
    const c = r.connect();
    const conn = r.st.conns.get(c)!; // internal by design: the connection record is what setPhase writes
    expect(conn.phase).toBe("ready");
    expect(() => setPhase(conn, "reconciling")).toThrow(InvariantViolation);
    const fresh = r.st.conns.get(r.open())!;
    expect(() => setPhase(fresh, "ready")).toThrow(InvariantViolation);
    expect(fresh.phase).toBe("hello");
  });

  it("R-W10: every kind the server accepts in some phase is agent-sent (ENVELOPES)", () => {
    for (const k of PAYLOAD_CASES) {
      const accepted = (Object.keys(CONN_PHASES) as Array<keyof typeof CONN_PHASES>).some((p) => serverAccepts(k, p));
      expect({ k, accepted }).toEqual({ k, accepted: ENVELOPES[k].from !== "server" });
    }
  });
});
