// What an agent logs when the server answers its upgrade with HTTP 503:
// the server's own words (shutting down, or its store taking no writes),
// not a guess.
import { describe, expect, it } from "vitest";
import { refusedUpgrade } from "../../../shells/agent/connect-cause.js";

describe("refusedUpgrade", () => {
  it("503 carries the server's reason from the body", () => {
    expect(refusedUpgrade(503, "the server's store is not taking writes: try again later\n", "ws://h:7400/v1/agent").cause).toBe(
      "the server is not taking agents now (HTTP 503: the server's store is not taking writes: try again later)",
    );
    expect(refusedUpgrade(503, "shutting down\n", "ws://h:7400/v1/agent").cause).toBe("the server is not taking agents now (HTTP 503: shutting down)");
    expect(refusedUpgrade(503, "", "ws://h:7400/v1/agent").cause).toBe("the server is not taking agents now (HTTP 503)");
  });
});
