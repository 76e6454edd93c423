// How the operator client words a control API error and which exit code it
// gives (client/control-client.ts `describeError`, client/exit-codes.ts).
import { create } from "@bufbuild/protobuf";
import { ConnectError, Code as ConnectCode } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { Code, ControlErrorSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { describeError } from "../../client/control-client.js";
import { EXIT } from "../../client/exit-codes.js";

describe("describeError: a request too large is invalid, not temporary (issue 38 item 10)", () => {
  it("a request over the server's readMaxBytes (a 100 MB script) is refused as too large with 65, not 'try again' with 75", () => {
    // What connect-node answers for a body over the server's readMaxBytes (its wording).
    const err = new ConnectError("message size 133333400 is larger than configured readMaxBytes 20971520", ConnectCode.ResourceExhausted);
    const said = describeError(err, { what: "submit to web-1" });
    expect([said.exitCode, said.message]).toEqual([
      EXIT.INVALID,
      "submit to web-1: refused as too large: message size 133333400 is larger than configured readMaxBytes 20971520",
    ]);
    const own = describeError(new ConnectError("message size 200 is larger than configured writeMaxBytes 100", ConnectCode.ResourceExhausted));
    expect(own.exitCode).toBe(EXIT.INVALID);
  });

  it("a script over MAX_SCRIPT_BYTES refused by the server's core (a 17 MB one) is 65 too; a capacity refusal stays 75", () => {
    const core = new ConnectError("CODE_VALIDATION: the script is 17000000 bytes; the limit is 16777216", ConnectCode.InvalidArgument, undefined, [
      {
        desc: ControlErrorSchema,
        value: create(ControlErrorSchema, { code: Code.VALIDATION, message: "the script is 17000000 bytes; the limit is 16777216" }),
      },
    ]);
    expect(describeError(core).exitCode).toBe(EXIT.INVALID);
    expect(describeError(new ConnectError("too many WatchFleet streams open", ConnectCode.ResourceExhausted)).exitCode).toBe(EXIT.TEMPORARY);
  });
});

describe("describeError: the server's own UNAVAILABLE (its store away, or starting) is temporary, not 'cannot reach the server'", () => {
  it("a store that takes no writes is 75 with the server's words; a refused connection stays 69", () => {
    const store = new ConnectError(
      "the server's store is not taking writes (for 3 s: PostgreSQL is not taking writes: connect ECONNREFUSED 127.0.0.1:5432 (ECONNREFUSED)); this call was not made",
      ConnectCode.Unavailable,
    );
    const said = describeError(store, { what: "submit to web-1", server: "https://rvbox" });
    expect([said.exitCode, said.message]).toEqual([
      EXIT.TEMPORARY,
      "submit to web-1: temporarily unavailable: the server's store is not taking writes (for 3 s: PostgreSQL is not taking writes: connect ECONNREFUSED 127.0.0.1:5432 (ECONNREFUSED)); this call was not made",
    ]);
    const starting = describeError(new ConnectError("the server is starting (waiting for the store: x): try again shortly", ConnectCode.Unavailable));
    expect(starting.exitCode).toBe(EXIT.TEMPORARY);
    const refused = describeError(new ConnectError("connect ECONNREFUSED 127.0.0.1:7401", ConnectCode.Unavailable), { server: "http://127.0.0.1:7401" });
    expect([refused.exitCode, refused.message]).toEqual([
      EXIT.UNAVAILABLE,
      "cannot reach the server at http://127.0.0.1:7401 (ECONNREFUSED); is it running? (--server / RVBOX_SERVER)",
    ]);
  });
});
