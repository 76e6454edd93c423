// A hand-driven harness for minimal core scenarios found by the simulator:
// one node, explicit inputs, effects collected, optional automatic
// durability. Frames are built with the core's own codec.

import { create } from "@bufbuild/protobuf";
import { encodeEnvelope, type Fence, type Payload } from "../../core/codec/frame-codec.js";
import { rangeToWire, SUPPORTED_PROTOCOL } from "../../core/codec/version.js";
import { ClientHelloSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { ArgvProgramSchema, ExecutionSpecSchema, type ExecutionSpec } from "../../protos/gen/rvbox/v1/common_pb.js";
import { simPorts } from "../../sim/sim-ports.js";
import { decodeEnvelope, type Envelope } from "../../sim/wire.js";

export const env = { ports: simPorts };

type Effect = { type: string } & Record<string, unknown>;
type StepFn<S, I> = (st: S, input: I, now: number, e: typeof env) => { state: S; effects: unknown[] };

export class Driver<S, I extends { type: string }> {
  now = 1_760_000_000_000;
  readonly log: Effect[] = [];
  constructor(
    public st: S,
    private readonly stepFn: StepFn<S, I>,
  ) {}

  /** One input; with `durable`, every persist it emits is reported durable at once (and so on). */
  step(input: I, durable = true): Effect[] {
    const out: Effect[] = [];
    let queue: I[] = [input];
    while (queue.length > 0) {
      const next: I[] = [];
      for (const i of queue) {
        const r = this.stepFn(this.st, i, this.now, env);
        this.st = r.state;
        for (const e of r.effects as Effect[]) {
          out.push(e);
          if (durable && e.type === "persist") next.push({ type: "durable", through: e.id as number } as unknown as I);
        }
      }
      queue = next;
    }
    this.log.push(...out);
    return out;
  }

  advance(ms: number): void {
    this.now += ms;
  }
}

export function sent(effects: Effect[], kind?: string): Array<{ conn: number; env: Envelope }> {
  return effects
    .filter((e) => e.type === "send" && (kind === undefined || e.kind === kind))
    .map((e) => ({ conn: e.conn as number, env: decodeEnvelope(e.data as Uint8Array)! }));
}

export function closes(effects: Effect[], conn?: number): Effect[] {
  return effects.filter((e) => e.type === "close" && (conn === undefined || e.conn === conn));
}

export function frame(fence: Fence | null, payload: Payload): Uint8Array {
  return encodeEnvelope(fence, payload);
}

export function hello(clientId: string, instanceId: string): Uint8Array {
  return frame(null, {
    case: "clientHello",
    value: create(ClientHelloSchema, {
      clientId,
      clientInstanceId: instanceId,
      supportedProtocol: rangeToWire(SUPPORTED_PROTOCOL),
      maxRunningCommands: 4,
      maxQueuedCommands: 16,
    }),
  });
}

export function argvSpec(...argv: string[]): ExecutionSpec {
  return create(ExecutionSpecSchema, { program: { case: "argv", value: create(ArgvProgramSchema, { argv }) } });
}

export function fenceOf(e: Envelope): Fence {
  return { sessionId: e.sessionId, generation: Number(e.sessionGeneration) };
}
