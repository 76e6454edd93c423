// The operator client's model (client/model.ts): the order clients are shown in.
import { create } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compareClientIds, sessionInfos } from "../../client/model.js";
import { ClientSchema } from "../../protos/gen/rvbox/v1/control_pb.js";

describe("client order", () => {
  it("client ids sort as an operator reads them: numbers by value, the rest by character", () => {
    const ids = ["web-10", "db-1", "web-2", "web-1", "web-01", "cache", "web-1a", "web-", "Web-3", "web-9999999999999999999999", "web-10000000000000000000000"];
    expect([...ids].sort(compareClientIds)).toEqual([
      "Web-3",
      "cache",
      "db-1",
      "web-",
      "web-01",
      "web-1",
      "web-1a",
      "web-2",
      "web-10",
      "web-9999999999999999999999",
      "web-10000000000000000000000",
    ]);
  });

  it("is a total order: antisymmetric, transitive, zero only for equal ids", () => {
    const id = fc.stringMatching(/^[a-c0-9-]{0,8}$/);
    fc.assert(
      fc.property(id, id, id, (a, b, c) => {
        expect(Math.sign(compareClientIds(a, b)) + Math.sign(compareClientIds(b, a))).toBe(0);
        expect(compareClientIds(a, b) === 0).toBe(a === b);
        if (compareClientIds(a, b) < 0 && compareClientIds(b, c) < 0) expect(compareClientIds(a, c)).toBeLessThan(0);
      }),
      { numRuns: 2000 },
    );
  });

  it("rvbox clients and the TUI's sessions view list clients in that order, whatever order the server sent", () => {
    const clients = ["web-10", "web-2", "db-1", "web-1"].map((clientId) => create(ClientSchema, { clientId }));
    expect(sessionInfos(clients, []).map((s) => s.clientId)).toEqual(["db-1", "web-1", "web-2", "web-10"]);
  });
});
