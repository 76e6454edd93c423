/**
 * DataSource over a live server's control API (ConnectRPC, bearer token).
 *
 *   fleet + command lists   a FleetFeed (fleet-feed.ts): the WatchFleet server
 *                           stream, or one internal refresher against servers
 *                           that do not have it
 *   output                  FollowOutput server stream per watched command,
 *                           resumed from the next event_seq after a drop
 *   actions                 the control RPCs, each with its own request_id
 */
import { randomUUID } from "node:crypto";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { ShellType } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { Command } from "../../protos/gen/rvbox/v1/control_pb.js";
import { createControlClient, describeError, isTransient, type ControlClient } from "../../shells/operator/control-client.js";
import { claimInfo, commandInfo, FOLLOW_MAX_BATCH_BYTES, followEvents, incidentInfo, outputItem, sessionInfos, signalKind } from "../../shells/operator/model.js";
import { OutputBuffer } from "../output-buffer.js";
import {
  Emitter,
  type CommandInfo,
  type DataSource,
  type FleetSnapshot,
  type OutputSnapshot,
  type SignalName,
  type SourceStatus,
  type SubmitSpec,
} from "../source.js";
import { WatchFeed, type FleetData, type FleetFeed } from "./fleet-feed.js";

export interface ControlSourceOptions {
  baseUrl: string;
  token: string;
  httpVersion?: "1.1" | "2";
  /** Interval of the fleet refresher used only against servers without WatchFleet (ms). */
  refreshMs?: number;
  /** Replace the RPC client (tests). */
  client?: ControlClient;
  /** Replace the fleet feed (default: a WatchFeed; tests pass a RefreshFeed or their own). */
  feed?: FleetFeed;
  /** Output buffers kept for commands no longer watched. */
  keepOutputs?: number;
  /** Shown in the header (e.g. where a demo fleet keeps its logs). */
  notes?: string[];
}

interface OutputWatch {
  buf: OutputBuffer;
  refs: number;
  abort: AbortController | null;
}

export class ControlSource implements DataSource {
  private readonly em = new Emitter();
  private readonly rpc: ControlClient;
  private readonly feed: FleetFeed;
  private snapshot: FleetSnapshot;
  private readonly lists = new Map<string | null, readonly CommandInfo[]>();
  private readonly interest = new Map<string | null, number>();
  private readonly outputs = new Map<string, OutputWatch>();
  private closed = false;
  readonly readOnly = false;

  constructor(private readonly o: ControlSourceOptions) {
    this.rpc = o.client ?? createControlClient({ baseUrl: o.baseUrl, token: o.token, httpVersion: o.httpVersion });
    this.feed = o.feed ?? new WatchFeed(this.rpc, { refreshMs: o.refreshMs ?? 1000 });
    const status: SourceStatus = { mode: "live", label: o.baseUrl, connected: false, error: null, updatedAt: null, feed: this.feed.label };
    this.snapshot = { sessions: [], claims: [], incidents: [], status, now: Date.now(), notes: o.notes ?? [] };
    this.feed.start({
      fleet: (d) => this.onFleet(d),
      commands: (c, list) => this.onCommands(c, list),
      error: (e) => this.onError(e),
    });
  }

  get version(): number {
    return this.em.version;
  }
  subscribe(l: () => void): () => void {
    return this.em.subscribe(l);
  }

  // ------------------------------------------------------------ feed

  private onFleet(d: FleetData): void {
    const now = Date.now();
    this.snapshot = {
      sessions: sessionInfos(d.clients, d.sessions).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)),
      claims: d.claims.map(claimInfo),
      incidents: d.incidents.map(incidentInfo).sort((a, b) => (b.at ?? 0) - (a.at ?? 0)),
      status: { ...this.snapshot.status, connected: true, error: null, updatedAt: now, feed: this.feed.label },
      now,
      notes: this.o.notes ?? [],
    };
    this.em.changed();
  }

  private onCommands(clientId: string | null, list: Command[]): void {
    this.lists.set(clientId, list.map(commandInfo));
    this.em.changed();
  }

  private onError(err: unknown): void {
    const error = describeError(err, { server: this.o.baseUrl }).message;
    this.snapshot = { ...this.snapshot, status: { ...this.snapshot.status, connected: false, error, feed: this.feed.label }, now: Date.now() };
    this.em.changed();
  }

  fleet(): FleetSnapshot {
    return this.snapshot;
  }

  commands(clientId: string | null): readonly CommandInfo[] {
    return this.lists.get(clientId) ?? [];
  }

  watchCommands(clientId: string | null): () => void {
    this.interest.set(clientId, (this.interest.get(clientId) ?? 0) + 1);
    this.feed.setInterest(new Set(this.interest.keys()));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.interest.get(clientId) ?? 1) - 1;
      if (n <= 0) this.interest.delete(clientId);
      else this.interest.set(clientId, n);
      this.feed.setInterest(new Set(this.interest.keys()));
    };
  }

  /** Patch a command everywhere it is listed (a lifecycle event or `finished` arrived on its stream). */
  private patchCommand(c: CommandInfo): void {
    for (const [k, list] of this.lists) {
      const i = list.findIndex((x) => x.uuid === c.uuid);
      if (i >= 0) this.lists.set(k, [...list.slice(0, i), c, ...list.slice(i + 1)]);
    }
  }

  // ------------------------------------------------------------ output

  output(uuid: string): OutputSnapshot {
    const w = this.outputs.get(uuid);
    const buf = w?.buf ?? new OutputBuffer(uuid);
    const s = buf.snapshot();
    if (s.command) return s;
    const listed = [...this.lists.values()].flat().find((c) => c.uuid === uuid) ?? null;
    return { ...s, command: listed };
  }

  watchOutput(uuid: string): () => void {
    let w = this.outputs.get(uuid);
    if (!w) {
      w = { buf: new OutputBuffer(uuid), refs: 0, abort: null };
      this.outputs.set(uuid, w);
    }
    // Most recently used last (for trimming).
    this.outputs.delete(uuid);
    this.outputs.set(uuid, w);
    w.refs++;
    if (!w.abort && !w.buf.finished) this.stream(w);
    if (!w.buf.command) void this.loadCommand(w);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      w.refs--;
      if (w.refs === 0) {
        w.abort?.abort();
        w.abort = null;
        this.trimOutputs();
      }
    };
  }

  private trimOutputs(): void {
    const keep = this.o.keepOutputs ?? 8;
    for (const [uuid, w] of this.outputs) {
      if (this.outputs.size <= keep) break;
      if (w.refs === 0) this.outputs.delete(uuid);
    }
  }

  private async loadCommand(w: OutputWatch): Promise<void> {
    try {
      const r = await this.rpc.getCommand({ issueUuid: w.buf.uuid });
      if (r.command && !w.buf.command) {
        w.buf.command = commandInfo(r.command);
        this.em.changed();
      }
    } catch (err) {
      if (ConnectError.from(err).code === ConnectCode.NotFound) {
        w.buf.error = `no command ${w.buf.uuid}`;
        this.em.changed();
      }
    }
  }

  private stream(w: OutputWatch): void {
    const abort = new AbortController();
    w.abort = abort;
    const run = async (): Promise<void> => {
      let delay = 250;
      while (!abort.signal.aborted && !this.closed) {
        try {
          for await (const batch of this.rpc.followOutput({ issueUuid: w.buf.uuid, fromEventSeq: BigInt(w.buf.next), follow: true, maxBatchBytes: FOLLOW_MAX_BATCH_BYTES }, { signal: abort.signal })) {
            delay = 250;
            if (w.buf.error) w.buf.error = null;
            // A batch of events is one change for the view.
            for (const m of followEvents(batch)) {
              if (m.item.case === "finished") {
                const c = commandInfo(m.item.value);
                w.buf.command = c;
                w.buf.finished = true;
                this.patchCommand(c);
              } else {
                const it = outputItem(m);
                if (!it) continue;
                w.buf.add(it);
                if (it.kind === "lifecycle" && w.buf.command) {
                  const c = { ...w.buf.command, state: it.state, revision: Math.max(w.buf.command.revision, it.revision) };
                  if (it.exitCode !== null) c.exitCode = it.exitCode;
                  if (it.signalName) c.signalName = it.signalName;
                  w.buf.command = c;
                  this.patchCommand(c);
                }
              }
            }
            this.em.changed();
          }
          if (w.buf.finished) break;
        } catch (err) {
          if (abort.signal.aborted || this.closed) break;
          w.buf.error = describeError(err, { server: this.o.baseUrl }).message;
          this.em.changed();
          if (!isTransient(err)) break;
        }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 5000);
      }
      if (w.abort === abort) w.abort = null;
    };
    void run();
  }

  // ------------------------------------------------------------ actions

  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      const r = await fn();
      this.feed.poke();
      return r;
    } catch (err) {
      throw describeError(err, { server: this.o.baseUrl, what });
    }
  }

  async authorize(clientId: string, instanceId: string): Promise<string> {
    const r = await this.call(`authorize ${clientId}`, () => this.rpc.authorizeInstance({ clientId, instanceId, requestId: randomUUID() }));
    const until = r.expiryTime ? new Date(Number(r.expiryTime.seconds) * 1000).toISOString().slice(11, 19) : "?";
    return `authorized instance ${instanceId} for ${clientId} once, until ${until}`;
  }

  async dismissClaim(clientId: string): Promise<string> {
    const r = await this.call(`dismiss claim ${clientId}`, () => this.rpc.dismissClaim({ clientId, requestId: randomUUID() }));
    return `dismissed the claim of instance ${r.instanceId} for ${clientId}`;
  }

  async ackIncident(id: string): Promise<void> {
    await this.call(`incident ${id}`, () => this.rpc.acknowledgeIncident({ incidentId: id, requestId: randomUUID() }));
  }

  async submit(spec: SubmitSpec): Promise<string> {
    const program =
      spec.program.kind === "shell"
        ? { case: "shell" as const, value: { shell: spec.program.shell === "bash" ? ShellType.BASH : ShellType.SH, commandLine: spec.program.line } }
        : { case: "argv" as const, value: { argv: spec.program.argv } };
    const r = await this.call(`submit to ${spec.clientId}`, () =>
      this.rpc.submitCommand({
        clientId: spec.clientId,
        program,
        stdinOpen: spec.stdinOpen ?? false,
        cwd: spec.cwd ?? "",
        environment: spec.env ?? [],
        timeoutMs: BigInt(spec.timeoutMs ?? 0),
        issueUuid: randomUUID(),
        requestId: randomUUID(),
      }),
    );
    return r.command!.issueUuid;
  }

  async signal(uuid: string, signal: SignalName): Promise<number> {
    const r = await this.call(`command ${uuid}`, () => this.rpc.signalCommand({ issueUuid: uuid, signal: signalKind(signal), requestId: randomUUID() }));
    return Number(r.revision);
  }

  async writeStdin(uuid: string, text: string, appendNewline: boolean): Promise<void> {
    await this.call(`stdin of ${uuid}`, () => this.rpc.writeStdin({ issueUuid: uuid, data: new TextEncoder().encode(text), appendNewline, requestId: randomUUID() }));
  }

  async closeStdin(uuid: string): Promise<void> {
    await this.call(`stdin of ${uuid}`, () => this.rpc.closeStdin({ issueUuid: uuid, requestId: randomUUID() }));
  }

  close(): void {
    this.closed = true;
    this.feed.stop();
    for (const w of this.outputs.values()) w.abort?.abort();
  }
}
